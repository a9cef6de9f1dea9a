// How a failed command speaks: one clear line on stderr (never a stack trace) and its exit code.
// Errors are recognised by name, not by class, so this file loads neither the server nor the
// client (each command imports only what it uses).
import { EXIT, UsageError } from './args.js';

interface ApiErrorLike {
  name: 'AgentdError';
  status: number;
  code: string;
  message: string;
  validation: { loc: (string | number)[]; msg: string }[] | null;
  body: unknown;
}

/** A connection that could not be made (fetch's TypeError carries the socket error as `cause`). */
export class ConnectError extends Error {
  override readonly name = 'ConnectError';
}

/** Wraps fetch's "fetch failed" into a sentence naming the URL it could not reach. */
export function connectErrorOf(err: unknown, url: string): unknown {
  if (!(err instanceof TypeError)) return err;
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  if (!cause && err.message !== 'fetch failed') return err;
  const why = cause?.code ?? cause?.message ?? err.message;
  return new ConnectError(`cannot reach agentd at ${url} (${why}); is it running? (--url or AGENTD_URL)`);
}

/** The exit code of an error and, with --json, the one line of JSON that says it. */
function jsonError(err: unknown): { code: number; line: Record<string, unknown> } {
  if (err instanceof UsageError) return { code: EXIT.usage, line: { error: { type: 'usage', message: err.message, help: `${err.helpOf} --help` } } };
  const e = err as Partial<ApiErrorLike> & Error;
  // The API's error body as is (its `code`, `message`, 422 `detail`), as --json prints answers.
  if (e?.name === 'AgentdError') return { code: EXIT.error, line: { error: { type: 'api', status: e.status, body: e.body } } };
  if (e?.name === 'ConnectError') return { code: EXIT.error, line: { error: { type: 'connect', message: e.message } } };
  return { code: EXIT.error, line: { error: { type: 'error', message: err instanceof Error ? err.message : String(err) } } };
}

/**
 * Prints the error on stderr and answers the exit code. `json` (the command line had --json):
 * one line `{"error": {type, message?, status?, body?, help?}}` instead of the sentence, so a
 * script reads failures the way it reads answers.
 */
export function reportError(err: unknown, write: (s: string) => void = (s) => process.stderr.write(s), json = false): number {
  if (json) {
    const { code, line } = jsonError(err);
    write(`${JSON.stringify(line)}\n`);
    return code;
  }
  if (err instanceof UsageError) {
    write(`agentd: ${err.message}\nRun '${err.helpOf} --help' for usage.\n`);
    return EXIT.usage;
  }
  const e = err as Partial<ApiErrorLike> & Error;
  if (e?.name === 'AgentdError') {
    if (e.validation && e.validation.length > 0) {
      write(`error: the request is invalid (HTTP ${e.status})\n`);
      for (const v of e.validation) write(`  ${v.loc.join('.')}: ${v.msg}\n`);
    } else write(`error: ${e.message}${e.status === 401 ? ' (--key or AGENTD_API_KEY)' : ''}\n`);
    return EXIT.error;
  }
  if (e?.name === 'ConnectError') {
    write(`error: ${e.message}\n`);
    return EXIT.error;
  }
  if (e?.name === 'ConfigError') {
    write(`agentd: ${e.message}\n`);
    return EXIT.error;
  }
  if ((e as { code?: string })?.code === 'locked' || /LOCK/.test(String(e?.message))) {
    write(`agentd: the data dir is in use by another agentd process (${String(e.message)})\n`);
    return EXIT.error;
  }
  write(`agentd: ${err instanceof Error ? err.message : String(err)}\n`);
  return EXIT.error;
}
