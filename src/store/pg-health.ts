// Whether PostgreSQL answered lately, as /ready reads it (PostgresStore.healthStatus): every query
// and probe reports here, and a change either way is one log line (lost / reachable again).
import type { StoreHealth } from './store.js';
import { describe } from './pg-errors.js';

export class PgHealth {
  status: StoreHealth = { ok: false, error: 'not open' };
  /** Date.now() of the last answer: the background probe is skipped while queries keep succeeding. */
  lastOkAt = 0;

  constructor(private readonly log?: (level: 'info' | 'warn', msg: string) => void) {}

  /** The database answered. `open`: the store is open (a store closing is not "reachable again"). */
  success(open: boolean): void {
    this.lastOkAt = Date.now();
    if (!this.status.ok && open) {
      this.log?.('info', 'agentd: PostgreSQL is reachable again');
      this.status = { ok: true };
    }
  }

  failure(e: unknown): void {
    const error = describe(e);
    if (this.status.ok) this.log?.('warn', `agentd: PostgreSQL is unreachable: ${error}`);
    this.status = { ok: false, error };
  }
}
