// Starts a real agentd server for HTTP tests: LevelDB in a fresh temp dir, a loopback port, and
// (usually) the model behind the scripted OpenAI-compatible server.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configFromObject } from '../../src/config.js';
import { startServer, type Server } from '../../src/main.js';
import type { ModelProvider } from '../../src/agent/model/types.js';
import type { Clock } from '../../src/clock.js';
import { createLogger, type LogLevel } from '../../src/telemetry/logger.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { waitFor } from './wait.js';

export interface TestServer extends Server {
  dataDir: string;
  /** Closes the server; keeps the data dir so a restart can reopen it. */
  stop(graceMs?: number): Promise<void>;
  /** Removes the data dir. */
  cleanup(): void;
}

const pgByDataDir = new Map<string, TestDatabase>();
if (process.env.AGENTD_TEST_STORE === 'postgres' && process.env.VITEST) {
  // Registered per test file (this module loads with each file): drops the databases a file's
  // servers used, including those of tests that failed before their cleanup(). (vitest is
  // imported only here: the crash and fuzz harnesses load this module outside it.)
  const { afterAll } = await import('vitest');
  afterAll(async () => {
    const dbs = [...pgByDataDir.values()];
    pgByDataDir.clear();
    await Promise.allSettled(dbs.map((db) => db.drop()));
  });
}

/**
 * The store a test server on `dataDir` opens when its config names none: LevelDB in the data dir,
 * or with AGENTD_TEST_STORE=postgres the data dir's own database (created on first use, so a
 * restart, or a fixture loaded before the server starts, finds the same data).
 */
export async function testStoreOf(dataDir: string): Promise<{ kind: 'level'; path: string } | { kind: 'postgres'; url: string }> {
  if (process.env.AGENTD_TEST_STORE !== 'postgres') return { kind: 'level', path: dataDir };
  let db = pgByDataDir.get(dataDir);
  if (!db) pgByDataDir.set(dataDir, (db = await createTestDatabase()));
  return { kind: 'postgres', url: db.url };
}

export function tempDir(prefix = 'agentd-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/**
 * `env`: the environment the config resolves against (default empty), e.g. AGENTD_MODEL_API_KEY.
 * `clock`: the server's "now" (default the system clock), e.g. a fixture's moment (test/helpers/snapshot-fixtures.ts).
 */
export async function startTestServer(
  config: Record<string, unknown> = {},
  opts: { dataDir?: string; model?: ModelProvider; modelUrl?: string; env?: NodeJS.ProcessEnv; clock?: Clock; createFoldMs?: number } = {},
): Promise<TestServer> {
  const dataDir = opts.dataDir ?? tempDir();
  const cfg = structuredClone(config) as Record<string, any>;
  cfg.server = { port: 0, ...(cfg.server ?? {}) };
  if (opts.modelUrl) {
    cfg.agent = { ...(cfg.agent ?? {}), model: { provider: 'openai-compatible', base_url: opts.modelUrl, model: 'scripted', ...(cfg.agent?.model ?? {}) } };
  }
  cfg.runs = { ...(cfg.runs ?? {}), orphan_sweep: { interval_seconds: 3600, ...(cfg.runs?.orphan_sweep ?? {}) } };
  // AGENTD_TEST_STORE=postgres: a test that names no store runs on PostgreSQL, one database per
  // data dir (a restart on the same data dir finds its data again), dropped by cleanup().
  if (process.env.AGENTD_TEST_STORE === 'postgres' && cfg.store === undefined) cfg.store = await testStoreOf(dataDir);
  const config2 = configFromObject(cfg, { dataDir, env: opts.env ?? {} });
  // Quiet unless asked (AGENTD_LOG_LEVEL=info): warnings and every 5xx line still reach stderr.
  const logger = createLogger({ level: (process.env.AGENTD_LOG_LEVEL as LogLevel | undefined) ?? 'warn' });
  const server = await startServer(config2, { model: opts.model, logger, clock: opts.clock, createFoldMs: opts.createFoldMs });
  return {
    ...server,
    dataDir,
    stop: (graceMs = 0) => server.close(graceMs),
    cleanup: () => {
      rmSync(dataDir, { recursive: true, force: true });
      const db = pgByDataDir.get(dataDir);
      pgByDataDir.delete(dataDir);
      void db?.drop().catch(() => {});
    },
  };
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? safeJson(text) : null, headers: res.headers };
}

export async function getJson(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(url, { headers });
  const text = await res.text();
  return { status: res.status, body: text ? safeJson(text) : null, headers: res.headers };
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** waitFor (test/helpers/wait.ts) with positional arguments, as the tests written before it call it. */
export function eventually<T>(
  fn: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs = 10_000,
  what = 'condition',
): Promise<T> {
  return waitFor(fn, { timeoutMs, what });
}
