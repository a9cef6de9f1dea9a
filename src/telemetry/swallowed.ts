// Errors the service deliberately does not propagate (a best-effort cleanup, a listener's fault,
// a scrape source down) still leave a trace: one `warn` line with the ids the site knows and
// `agentd_swallowed_errors_total{site}` on /metrics/prometheus. A swallow that is safe by design
// (closing what may already be closed) says why in a comment instead.
import { Counter, type Registry } from 'prom-client';
import type { AppLogger } from './logger.js';
import { AgentdFailure } from '../errors.js';

/**
 * One counter per process, added to each Metrics registry: the sites are process-wide (pure
 * helpers have no registry of their own), and a process serves one agentd.
 */
const counter = new Counter({
  name: 'agentd_swallowed_errors_total',
  help: 'Errors caught and not propagated (logged at warn), by site',
  labelNames: ['site'],
  registers: [],
});

let logger: AppLogger | null = null;

/** Called by the composition root with the process's logger (lines before that are counted only). */
export function bindSwallowedErrorLog(l: AppLogger): void {
  logger = l;
}

/** Adds the counter to a Metrics registry. */
export function registerSwallowedErrors(registry: Registry): void {
  if (!registry.getSingleMetric('agentd_swallowed_errors_total')) registry.registerMetric(counter);
}

/** Records one swallowed error at `site` (a stable dotted name: module.operation). */
export function reportSwallowed(site: string, err: unknown, ids: Record<string, unknown> = {}): void {
  counter.inc({ site });
  logger?.warn({ ...ids, site, err: err instanceof Error ? err : new Error(String(err)) }, `swallowed error at ${site}`);
}

/**
 * A `.catch()` handler for a promise whose failure must not propagate: reports it, resolves
 * undefined. `expected`: failures that are a normal answer here (not reported), e.g. a cancel of
 * a run that ended meanwhile.
 */
export const swallow =
  (site: string, ids: Record<string, unknown> = {}, expected?: (err: unknown) => boolean) =>
  (err: unknown): undefined => {
    if (!expected?.(err)) reportSwallowed(site, err, ids);
    return undefined;
  };

/** A refusal the service answers with a 4xx (the run already ended, was not found, ...): not a fault. */
export const isRefusal = (err: unknown): boolean => err instanceof AgentdFailure && err.status < 500;

/** The current count at `site` (tests). */
export async function swallowedCount(site: string): Promise<number> {
  const v = (await counter.get()).values.find((x) => x.labels.site === site);
  return v?.value ?? 0;
}
