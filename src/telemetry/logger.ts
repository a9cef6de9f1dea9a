// The one logger of a process: Fastify's pino, for request lines, 5xx lines, the runtime's and the
// background engine's messages and the CLI's `serve` lines alike. JSON lines on stderr by default
// (one object per line, `level` as a name, `time` in ISO 8601); a short human format when stderr is
// a terminal or `log.format` pretty (AGENTD_LOG_FORMAT; the settings come from src/config.ts). Every line goes through the process's Redactor, like
// everything telemetry stores or exports.
import { pino, stdTimeFunctions, type Logger } from 'pino';
import { defaultRedactor, redact, type Redactor } from './redact.js';

export type { Logger };

/**
 * Levels an operator may choose. `fatal` and `silent` are left out on purpose: they would hide
 * the `error` line every 5xx writes (docs/operations.md promises that line whatever the setting).
 */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFormat = 'json' | 'pretty';

/** The settings of src/config.ts's `log` section (level, format) that shape the logger. */
export function loggerSettings(log: { readonly level: LogLevel; readonly format?: LogFormat }): Pick<LoggerOptions, 'level' | 'format'> {
  return { level: log.level, ...(log.format ? { format: log.format } : {}) };
}

/** Where lines go: a stream (process.stderr) or anything with write(), e.g. a test's capture. */
export interface LogDestination {
  write(line: string): unknown;
  isTTY?: boolean;
}

export interface LoggerOptions {
  level?: LogLevel;
  /** Default: pretty when the destination is a terminal, else JSON. */
  format?: LogFormat;
  destination?: LogDestination;
  redactor?: Redactor;
}

/** One level's method: a message, or fields then a message (pino's order). */
export interface LogMethod {
  (msg: string): void;
  (fields: Record<string, unknown>, msg: string): void;
}

/**
 * What the runtime logs through (the run service, the background manager, webhooks, idempotency):
 * the process's one pino logger, or a child of it. `child(bindings)` gives a logger whose every line
 * carries the bindings: a live run's host logs through `child({ run_id })`, a background run's
 * through `child({ bg_run_id, task_id })`, a webhook delivery's through `child({ delivery_id })`.
 * pino's Logger satisfies it; tests pass a capture or `silentLogger`.
 */
export interface AppLogger {
  debug: LogMethod;
  info: LogMethod;
  warn: LogMethod;
  error: LogMethod;
  child(bindings: Record<string, unknown>): AppLogger;
}

const nothing = (): void => undefined;

/** Writes nothing (a runtime built without a logger: unit tests, scripts). */
export const silentLogger: AppLogger = { debug: nothing, info: nothing, warn: nothing, error: nothing, child: () => silentLogger };

function isPlain(v: object): boolean {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null || Array.isArray(v);
}

/**
 * A line's fields as they may be written: secret-named fields and secrets inside strings
 * redacted. Errors keep their stack (redacted too). Fastify's request and reply objects are left
 * to the serializers below, which pick the few fields a line needs.
 */
function redactFields(obj: Record<string, unknown>, redactor: Redactor): Record<string, unknown> {
  const plain: Record<string, unknown> = {};
  const kept: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v instanceof Error) {
      const code = (v as { code?: unknown }).code;
      // Through redact() with the rest, so a secret-named field inside is caught too.
      plain[k] = { type: v.name, message: String(v.message), ...(v.stack ? { stack: v.stack } : {}), ...(code !== undefined ? { code: String(code) } : {}) };
    } else if (v !== null && typeof v === 'object' && !isPlain(v)) {
      kept[k] = v;
    } else {
      plain[k] = v;
    }
  }
  // As one object, so field names count (`password`, `authorization`), not only values.
  return { ...(redact(plain, redactor) as Record<string, unknown>), ...kept };
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const destination = opts.destination ?? process.stderr;
  const format = opts.format ?? (destination.isTTY ? 'pretty' : 'json');
  const redactor = opts.redactor ?? defaultRedactor;
  const stream = format === 'pretty' ? prettyDestination(destination, Boolean(destination.isTTY)) : destination;
  const root = pino(
    {
      level: opts.level ?? 'info',
      timestamp: stdTimeFunctions.isoTime,
      formatters: {
        level: (label) => ({ level: label }),
        log: (obj) => redactFields(obj as Record<string, unknown>, redactor),
      },
      hooks: {
        // The message text quotes errors (a provider's answer): redacted like the fields.
        logMethod(args, method) {
          for (let i = 0; i < args.length; i++) if (typeof args[i] === 'string') args[i] = redactor.text(args[i] as string);
          return method.apply(this, args as Parameters<typeof method>);
        },
      },
      serializers: {
        // The URL may carry a credential in its query (`?api_key=`): value patterns scrub it.
        req: (req: { method?: string; url?: string; ip?: string }) => ({
          method: req.method,
          url: redactor.text(String(req.url ?? '')),
          remoteAddress: req.ip,
        }),
        res: (reply: { statusCode?: number }) => ({ statusCode: reply.statusCode }),
        // Errors were made plain (and redacted) by formatters.log, which runs first.
        err: (e: unknown) => e,
      },
    },
    stream as never,
  );
  // A child's bindings are written on each of its lines but pass neither formatters.log nor (for
  // a child) formatters.bindings: pino serialises them once, when the child is made. So they are
  // redacted here, on the way in; children inherit this `child` from the root.
  const childOf = root.child;
  root.child = function (this: Logger, bindings, options) {
    return childOf.call(this, redactFields(bindings as Record<string, unknown>, redactor), options);
  } as typeof root.child;
  return root;
}

const LEVEL_COLOURS: Record<string, string> = { trace: '90', debug: '36', info: '32', warn: '33', error: '31', fatal: '35' };

/**
 * The pretty format: `HH:MM:SS.mmm LEVEL [reqId] message key=value ...`, one line per entry,
 * coloured on a terminal. Small and built in (pino-pretty would be one more dependency tree).
 */
export function prettyLine(line: string, colour = false): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`;
  }
  const { time, level, msg, pid: _pid, hostname: _host, reqId, ...rest } = o;
  const t = typeof time === 'string' ? time.slice(11, 23) : '';
  const name = String(level ?? '')
    .toUpperCase()
    .padEnd(5);
  const lvl = colour ? `\u001b[${LEVEL_COLOURS[String(level)] ?? '0'}m${name}\u001b[0m` : name;
  const fields = Object.entries(rest)
    .map(([k, v]) => `${k}=${typeof v === 'string' && /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v)}`)
    .join(' ');
  return `${t} ${lvl} ${reqId ? `[${String(reqId)}] ` : ''}${String(msg ?? '')}${fields ? `  ${fields}` : ''}\n`;
}

function prettyDestination(destination: LogDestination, colour: boolean): LogDestination {
  return { write: (line: string) => destination.write(prettyLine(line, colour)) };
}
