// The process's real logger (pino, src/telemetry/logger.ts) writing JSON lines into memory, for
// tests that check what a component logs: its level, message, fields and child bindings.
import { createLogger, type LogLevel, type Logger } from '../../src/telemetry/logger.js';
import type { Redactor } from '../../src/telemetry/redact.js';

export type LogEntry = Record<string, any> & { level: string; msg: string };

export interface LogCapture {
  logger: Logger;
  /** The raw lines written so far. */
  lines: string[];
  /** The lines parsed. */
  entries(): LogEntry[];
  /** The bindings of every child logger made from it (or from its children), in order. */
  children: Array<Record<string, unknown>>;
}

export function captureLog(opts: { level?: LogLevel; redactor?: Redactor } = {}): LogCapture {
  const lines: string[] = [];
  const destination = { write: (s: string) => void lines.push(...s.split('\n').filter(Boolean)) };
  const logger = createLogger({ destination, format: 'json', level: opts.level ?? 'debug', ...(opts.redactor ? { redactor: opts.redactor } : {}) });
  const children: Array<Record<string, unknown>> = [];
  // Children inherit the root's `child`: wrapping it once sees every child made below it.
  const childOf = logger.child;
  logger.child = function (this: Logger, bindings, options) {
    children.push({ ...bindings });
    return childOf.call(this, bindings, options);
  } as typeof logger.child;
  return { logger, lines, children, entries: () => lines.map((l) => JSON.parse(l) as LogEntry) };
}
