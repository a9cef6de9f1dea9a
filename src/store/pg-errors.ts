// How the PostgreSQL adapter classifies failures: transient (retried), the database unusable
// (StoreError 'unavailable', HTTP 503), the commit function's own check codes.
import pg from 'pg';
import { StoreError } from './store.js';

export const ERROR_CODES: Record<string, 'conflict' | 'stale_version' | 'not_found' | 'full'> = {
  AG409: 'conflict',
  AG412: 'stale_version',
  AG404: 'not_found',
  AG429: 'full',
};

/** SQLSTATEs after which the same statement may succeed when sent again. */
export const isTransientCode = (code: string | undefined): boolean =>
  !!code && (code.startsWith('08') || ['40001', '40P01', '57P01', '57P02', '57P03', '53300', '53400'].includes(code));

/** Errors of the connection itself (no SQLSTATE): refused, reset, timed out, terminated. */
export const isConnectionError = (e: unknown): boolean => {
  if (e instanceof pg.DatabaseError) return isTransientCode(e.code);
  const err = e as { code?: string; message?: string };
  return (
    (typeof err?.code === 'string' && /^(ECONN|EPIPE|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH)/.test(err.code)) ||
    /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Connection ended/i.test(
      String(err?.message ?? ''),
    )
  );
};

/** A message about a failure that carries no credentials (pg messages never hold the URL; be sure). */
export const describe = (e: unknown): string => {
  const err = e as { code?: string; message?: string };
  const msg = String(err?.message ?? e).replace(/postgres(ql)?:\/\/\S*/gi, 'postgres://…');
  return err?.code ? `${msg} (${err.code})` : msg;
};

/** SQLSTATEs saying the database itself cannot be used: gone, login refused, shutting down, full. */
const isUnavailableCode = (code: string | undefined): boolean =>
  !!code && (isTransientCode(code) || code === '3D000' || code.startsWith('28') || code.startsWith('57P') || code.startsWith('53'));

/**
 * The error a caller sees once retrying is over: StoreError 'unavailable' (HTTP 503) when the
 * database cannot be used, with the original as `cause`; any other error unchanged.
 * `inFlightWrite`: the connection broke while a write was in flight, so it may have committed.
 */
export const unavailable = (e: unknown, inFlightWrite: boolean): unknown => {
  const code = e instanceof pg.DatabaseError ? e.code : undefined;
  if (!(code ? isUnavailableCode(code) : isConnectionError(e))) return e;
  const err = new StoreError(
    'unavailable',
    inFlightWrite
      ? `the connection to PostgreSQL was lost while a write was in flight; it may or may not have been applied: ${describe(e)}`
      : `PostgreSQL is unreachable: ${describe(e)}`,
  );
  (err as Error & { cause?: unknown }).cause = e;
  return err;
};
