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

/** Prints the error on stderr and answers the exit code. */
export function reportError(err: unknown, write: (s: string) => void = (s) => process.stderr.write(s)): number {
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
