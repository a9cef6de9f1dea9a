// Completion webhooks, step 1 (docs/webhooks.md): the DISPATCHER tails the event log from a cursor
// kept in the store (`meta/webhooks_cursor`) and, for each event that makes a delivery, writes one
// delivery record per receiver (the outbox, kind `webhook_deliveries`) in the SAME atomic commit
// that moves the cursor. A kill before that commit re-reads the same events after the restart and
// derives the same delivery ids; a kill after it finds the deliveries waiting. Nothing is lost,
// nothing is doubled. Instances sharing a store race on the cursor's CAS: the loser reads again.
import { createHash } from 'node:crypto';
import type { Config } from '../config.js';
import type { Clock } from '../clock.js';
import { isStoreError, type Store, type WriteOp } from '../store/store.js';
import { repos } from '../store/repos/index.js';
import {
  TRIGGER_EVENT_TYPES,
  deliveryIndexes,
  deriveWebhook,
  displayUrl,
  endpointIdOf,
  eventTenant,
  type DeliveryValue,
  type SubValue,
} from './webhook-events.js';

export const CURSOR_ID = 'webhooks_cursor';

export interface WebhookDispatcherDeps {
  store: Store;
  clock: Clock;
  webhooks: Config['webhooks'];
  /** The service is stopping: no further round. */
  stopped(): boolean;
}

export class WebhookDispatcher {
  constructor(private readonly d: WebhookDispatcherDeps) {}

  /** First start: the cursor begins at the end of the log (no webhooks for history). */
  async initCursor(): Promise<void> {
    const r = repos(this.d.store);
    if (await r.meta.get(CURSOR_ID)) return;
    const last = await this.d.store.lastEventCursor();
    await r.meta.create(CURSOR_ID, { cursor: last }).catch((e: unknown) => {
      if (!isStoreError(e, 'conflict')) throw e;
    });
  }

  /** Turns the log's new trigger events into deliveries; true when it wrote any. */
  async dispatch(): Promise<boolean> {
    const w = this.d.webhooks;
    const r = repos(this.d.store);
    let wrote = false;
    for (let round = 0; round < 50 && !this.d.stopped(); round++) {
      const cur = await r.meta.get<{ cursor: string | null }>(CURSOR_ID);
      if (!cur) return wrote;
      const page = await this.d.store.readEvents({ filters: { event_type: [...TRIGGER_EVENT_TYPES] }, after: cur.value.cursor, limit: 200 });
      if (page.events.length === 0) return wrote;
      const nowMs = this.d.clock.now();
      const oldest = nowMs - w.retry_hours * 3_600_000;
      const drafts: DeliveryValue[] = [];
      const subs = new Map<string, SubValue | null>();
      for (const ev of page.events) {
        const d = deriveWebhook(ev);
        if (!d || Date.parse(ev.timestamp) < oldest) continue;
        const body = JSON.stringify({ type: d.type, timestamp: ev.timestamp, data: d.data });
        const make = (endpoint: string, url: string): DeliveryValue => ({
          delivery_id: `msg_${createHash('sha256').update(`${endpoint}|${d.dedupe}|${d.type}`).digest('hex').slice(0, 32)}`,
          event_type: d.type,
          endpoint,
          url: displayUrl(url, endpoint !== 'request'),
          run_id: (d.data.run_id as string | null) ?? null,
          session_id: (d.data.session_id as string | null) ?? null,
          task_id: (d.data.task_id as string | null) ?? null,
          body,
          status: 'pending',
          attempts: 0,
          next_attempt_at: new Date(nowMs).toISOString(),
          last_attempt_at: null,
          last_status_code: null,
          last_error: null,
          history: [],
          created_at: new Date(nowMs).toISOString(),
          delivered_at: null,
          source_cursor: ev.cursor,
          ...(eventTenant(ev) ? { tenant: eventTenant(ev) } : {}),
        });
        for (const e of w.endpoints) if (e.events.includes(d.type)) drafts.push(make(endpointIdOf(e.url), e.url));
        const runId = d.data.run_id as string | null;
        if (runId && w.allow_request_hosts.length > 0) {
          if (!subs.has(runId)) subs.set(runId, (await r.webhookSubs.get<SubValue>(runId))?.value ?? null);
          const sub = subs.get(runId);
          if (sub) drafts.push(make('request', sub.url));
        }
      }
      // Derived ids are stable: a round redone after a crash finds its deliveries already there.
      const unique = [...new Map(drafts.map((d) => [d.delivery_id, d])).values()];
      const existing = unique.length ? await r.webhookDeliveries.getMany(unique.map((d) => d.delivery_id)) : [];
      const ops: WriteOp[] = unique.filter((_, i) => !existing[i]).map((d) => r.webhookDeliveries.createOp(d.delivery_id, d, deliveryIndexes(d)));
      const last = page.events[page.events.length - 1].cursor;
      ops.push(r.meta.updateOp(CURSOR_ID, { cursor: last }, cur.version));
      try {
        await this.d.store.commit(ops);
        if (ops.length > 1) wrote = true;
      } catch (err) {
        if (isStoreError(err, 'stale_version') || isStoreError(err, 'conflict')) continue; // another instance moved it: read again
        throw err;
      }
      if (!page.next_cursor) return wrote;
    }
    return wrote;
  }
}
