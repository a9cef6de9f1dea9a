// Completion webhooks (issue 14, item 5; docs/webhooks.md).
//
// Durable from end to end, and never in a run's way:
//  1. A run's end (or pause for a person) is already in the event log before the run reads as
//     ended. The DISPATCHER tails that log from a cursor kept in the store (`meta/webhooks_cursor`)
//     and, for each event that matters, writes one delivery record per receiver (the outbox, kind
//     `webhook_deliveries`) in the SAME atomic commit that moves the cursor. A kill before that
//     commit re-reads the same events after the restart and derives the same delivery ids; a kill
//     after it finds the deliveries waiting. Nothing is lost, nothing is doubled.
//  2. The SENDER posts pending deliveries, at most `max_concurrent` at a time, each within
//     `timeout_seconds`, signed per Standard Webhooks (webhook-id / webhook-timestamp /
//     webhook-signature: v1,<base64 HMAC-SHA256 of `${id}.${timestamp}.${body}`>). A delivery is
//     claimed (compare-and-swap) before it is sent, so instances sharing a store do not both send
//     it. Failures are retried with exponential backoff for `retry_hours` (24 h), then `failed`.
//     At least once: a receiver deduplicates on webhook-id, which is stable across retries.
//
// Secrets (the signing keys) live only in the resolved config (non-enumerable): never in a
// delivery record, a log line or telemetry.
import { createHash } from 'node:crypto';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { Config } from '../config.js';
import type { Clock } from '../clock.js';
import { HttpValidationFailure } from '../errors.js';
import { isStoreError, type Page, type Store, type Versioned, type WriteOp } from '../store/store.js';
import type { EventBus } from '../telemetry/bus.js';
import { repos } from '../store/repos/index.js';
import {
  TRIGGERS,
  TRIGGER_EVENT_TYPES,
  deriveWebhook,
  displayUrl,
  endpointIdOf,
  hostAllowed,
  publicDelivery,
  signWebhook,
  type DeliveryValue,
  type SubValue,
} from './webhook-events.js';
import { swallow, reportSwallowed } from '../telemetry/swallowed.js';
import { silentLogger, type AppLogger } from '../telemetry/logger.js';

const CURSOR_ID = 'webhooks_cursor';
/** Pending deliveries looked at per send round at most. */
const SCAN_MAX = 2000;
/** Attempts kept per delivery (the newest). */
const MAX_HISTORY = 10;

export interface WebhooksOptions {
  config: Config;
  store: Store;
  clock: Clock;
  bus: EventBus;
  registry: Registry;
  workerId: string;
  /** The process's logger; a delivery's lines go through a child bound to its delivery_id and run_id. */
  logger?: AppLogger;
  /** Idle poll of the log and the outbox. Default 1 s (events wake it sooner). */
  pollMs?: number;
}

export class Webhooks {
  private readonly w: Config['webhooks'];
  private readonly inflight = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void) | null = null;
  private running = false;
  private stopped = false;
  /** Aborts the attempts in flight when the service stops (their claims are released at the next start). */
  private readonly stopping = new AbortController();
  private pumping: Promise<void> | null = null;
  private again = false;
  private lastRetention = 0;
  /** Something changed in the outbox since the last scan (new deliveries, an attempt ended). */
  private dirty = true;
  /** Earliest next_attempt_at seen by the last scan. */
  private earliestDue = 0;
  private readonly delivered: Counter;
  private readonly attemptsTotal: Counter;
  private readonly seconds: Histogram;
  private readonly log: AppLogger;

  constructor(private readonly o: WebhooksOptions) {
    this.w = o.config.webhooks;
    this.log = o.logger ?? silentLogger;
    this.delivered = new Counter({
      name: 'agentd_webhook_deliveries_total',
      help: 'Webhook deliveries ended, by outcome (delivered, failed)',
      labelNames: ['outcome'],
      registers: [o.registry],
    });
    this.attemptsTotal = new Counter({
      name: 'agentd_webhook_attempts_total',
      help: 'Webhook delivery attempts, by result (success, http_error, network_error, timeout)',
      labelNames: ['result'],
      registers: [o.registry],
    });
    this.seconds = new Histogram({
      name: 'agentd_webhook_attempt_duration_seconds',
      help: 'Webhook delivery attempt duration',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [o.registry],
    });
    const pending: Gauge = new Gauge({
      name: 'agentd_webhook_deliveries_pending',
      help: 'Webhook deliveries waiting to be sent or retried, from the store',
      registers: [o.registry],
      collect: async () => {
        const n = await repos(o.store)
          .webhookDeliveries.count({ name: 'status', value: 'pending' })
          .catch((e: unknown) => (reportSwallowed('webhooks.scrape_pending', e), null));
        if (n !== null) pending.set(n);
      },
    });
  }

  /** On when a receiver is configured or per-request URLs are allowed. */
  get enabled(): boolean {
    return this.w.endpoints.length > 0 || this.w.allow_request_hosts.length > 0;
  }

  /** 422 unless per-request webhooks are allowed and the URL's host is on the allowlist. */
  checkRequestUrl(raw: string, loc: Array<string | number> = ['body', 'webhook']): void {
    const fail = (msg: string) => new HttpValidationFailure([{ loc, msg, type: 'webhook_url_not_allowed' }]);
    if (this.w.allow_request_hosts.length === 0)
      throw fail('per-request webhooks are off: the operator must list allowed hosts in webhooks.allow_request_hosts');
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw fail('expected an absolute http(s) URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw fail('expected an http or https URL');
    if (url.username || url.password) throw fail('a webhook URL must not carry credentials');
    if (!hostAllowed(url, this.w.allow_request_hosts)) throw fail(`host '${url.host}' is not in webhooks.allow_request_hosts`);
  }

  /** The ops that remember a run's per-request webhook URL (written before the run starts). */
  async rememberRequestUrl(runId: string, url: string): Promise<void> {
    const value: SubValue = { run_id: runId, url, created_at: new Date(this.o.clock.now()).toISOString() };
    await this.o.store.commit([repos(this.o.store).webhookSubs.updateOp(runId, value, null)]);
  }

  async start(): Promise<void> {
    if (!this.enabled || this.running) return;
    this.running = true;
    // First start: begin at the end of the log (no webhooks for history).
    if (!(await repos(this.o.store).meta.get(CURSOR_ID))) {
      const last = await this.o.store.lastEventCursor();
      await repos(this.o.store)
        .meta.create(CURSOR_ID, { cursor: last })
        .catch((e: unknown) => {
          if (!isStoreError(e, 'conflict')) throw e;
        });
    }
    // A single-process store: whatever a dead process had claimed is free now.
    if (!this.o.store.capabilities.sharedByInstances) await this.releaseClaims();
    this.unsubscribe = this.o.bus.subscribe({}, (ev) => {
      if (TRIGGERS.has(ev.event_type)) this.kick();
    });
    this.schedule();
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.running = false;
    this.stopping.abort();
    if (this.timer) clearTimeout(this.timer);
    this.unsubscribe?.();
    // The pump reports its own failures (dispatch/send log them); stop only waits for it to end.
    await this.pumping?.catch(() => undefined);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.kick();
      this.schedule();
    }, this.o.pollMs ?? 1000);
    this.timer.unref();
  }

  /** Runs dispatch + send now (or right after the round in progress). */
  kick(): void {
    if (!this.running || this.stopped) return;
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = (async () => {
      do {
        this.again = false;
        try {
          await this.dispatch();
          await this.sendDue();
          await this.retention();
        } catch (err) {
          if (!this.stopped) this.log.warn({ err: String(err) }, 'webhook round failed');
        }
      } while (this.again && !this.stopped);
    })().finally(() => {
      this.pumping = null;
    });
  }

  // ------------------------------------------------------------------ dispatch (log -> outbox)

  private async dispatch(): Promise<void> {
    for (let round = 0; round < 50 && !this.stopped; round++) {
      const cur = await repos(this.o.store).meta.get<{ cursor: string | null }>(CURSOR_ID);
      if (!cur) return;
      const page = await this.o.store.readEvents({ filters: { event_type: [...TRIGGER_EVENT_TYPES] }, after: cur.value.cursor, limit: 200 });
      if (page.events.length === 0) return;
      const nowMs = this.o.clock.now();
      const oldest = nowMs - this.w.retry_hours * 3_600_000;
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
        });
        for (const e of this.w.endpoints) if (e.events.includes(d.type)) drafts.push(make(endpointIdOf(e.url), e.url));
        const runId = d.data.run_id as string | null;
        if (runId && this.w.allow_request_hosts.length > 0) {
          if (!subs.has(runId)) subs.set(runId, (await repos(this.o.store).webhookSubs.get<SubValue>(runId))?.value ?? null);
          const sub = subs.get(runId);
          if (sub) drafts.push(make('request', sub.url));
        }
      }
      // Derived ids are stable: a round redone after a crash finds its deliveries already there.
      const unique = [...new Map(drafts.map((d) => [d.delivery_id, d])).values()];
      const existing = unique.length ? await repos(this.o.store).webhookDeliveries.getMany(unique.map((d) => d.delivery_id)) : [];
      const ops: WriteOp[] = unique
        .filter((_, i) => !existing[i])
        .map((d) => repos(this.o.store).webhookDeliveries.createOp(d.delivery_id, d, { status: d.status, run_id: d.run_id }));
      const last = page.events[page.events.length - 1].cursor;
      ops.push(repos(this.o.store).meta.updateOp(CURSOR_ID, { cursor: last }, cur.version));
      try {
        await this.o.store.commit(ops);
        if (ops.length > 1) this.dirty = true;
      } catch (err) {
        if (isStoreError(err, 'stale_version') || isStoreError(err, 'conflict')) continue; // another instance moved it: read again
        throw err;
      }
      if (!page.next_cursor) return;
    }
  }

  // ------------------------------------------------------------------ send (outbox -> receivers)

  private async releaseClaims(): Promise<void> {
    let cursor: string | null = null;
    const now = new Date(this.o.clock.now()).toISOString();
    do {
      const page: Awaited<ReturnType<Store['listRecords']>> = await repos(this.o.store).webhookDeliveries.list<DeliveryValue>({
        index: { name: 'status', value: 'pending' },
        cursor,
        limit: 500,
      });
      for (const r of page.items as Versioned<DeliveryValue>[]) {
        if (r.value.next_attempt_at > now && r.value.attempts > 0 && r.value.last_attempt_at === null) {
          await repos(this.o.store)
            .webhookDeliveries.update(r.id, { ...r.value, next_attempt_at: now }, r.version)
            .catch(swallow('webhooks.release_claim', { delivery_id: r.id }));
        }
      }
      cursor = page.next_cursor;
    } while (cursor);
  }

  private backoffMs(attempts: number): number {
    const base = this.w.initial_backoff_seconds * 1000;
    return Math.min(this.w.max_backoff_seconds * 1000, base * 2 ** Math.max(0, attempts - 1));
  }

  private async sendDue(): Promise<void> {
    const room = this.w.max_concurrent - this.inflight.size;
    if (room <= 0) return;
    const now = this.o.clock.now();
    // Nothing new and nothing due yet: no scan (a receiver that is down can leave thousands of
    // deliveries backing off; they are not re-read on every event).
    if (!this.dirty && now < this.earliestDue) return;
    this.dirty = false;
    let earliest = Number.POSITIVE_INFINITY;
    const due: Array<Versioned<DeliveryValue>> = [];
    let cursor: string | null = null;
    // Oldest first, at most SCAN_MAX records a round: a bounded walk, the rest next round.
    for (let scanned = 0; scanned < SCAN_MAX && due.length < room;) {
      const page: Page<DeliveryValue> = await repos(this.o.store).webhookDeliveries.list<DeliveryValue>({
        index: { name: 'status', value: 'pending' },
        cursor,
        limit: 200,
      });
      for (const r of page.items) {
        if (this.inflight.has(r.id)) continue;
        const at = Date.parse(r.value.next_attempt_at);
        if (at <= now && due.length < room) due.push(r);
        else earliest = Math.min(earliest, at);
      }
      scanned += page.items.length;
      if (!page.next_cursor) break;
      if (scanned >= SCAN_MAX) this.dirty = true; // more to look at next round
      cursor = page.next_cursor;
    }
    this.earliestDue = earliest;
    for (const r of due) {
      this.inflight.add(r.id);
      void this.attempt(r)
        .catch((err: unknown) => this.log.warn({ err: String(err) }, 'webhook attempt failed'))
        .finally(() => {
          this.inflight.delete(r.id);
          this.dirty = true;
          this.kick();
        });
    }
  }

  /** One attempt: claim (CAS), post, record the result. */
  private async attempt(rec: Versioned<DeliveryValue>): Promise<void> {
    const timeoutMs = this.w.timeout_seconds * 1000;
    const startedMs = this.o.clock.now();
    // The claim: nobody else sends it until the attempt's time is up. `last_attempt_at: null`
    // marks a claim whose result was never written (a crash): released at the next start.
    let claimed: Versioned<DeliveryValue>;
    try {
      claimed = await repos(this.o.store).webhookDeliveries.update(
        rec.id,
        {
          ...rec.value,
          attempts: rec.value.attempts + 1,
          next_attempt_at: new Date(startedMs + timeoutMs + 5_000).toISOString(),
          last_attempt_at: null,
        },
        rec.version,
      );
    } catch (err) {
      if (isStoreError(err, 'stale_version') || isStoreError(err, 'not_found')) return;
      throw err;
    }
    const target = this.targetOf(claimed.value);
    let statusCode: number | null = null;
    let error: string | null = null;
    let result: 'success' | 'http_error' | 'network_error' | 'timeout' = 'network_error';
    if (!target) {
      error = 'the receiver is no longer configured';
    } else {
      const ts = Math.floor(startedMs / 1000);
      try {
        const res = await fetch(target.url, {
          method: 'POST',
          redirect: 'manual', // a redirect could lead anywhere (SSRF): it is a failure
          signal: AbortSignal.any([AbortSignal.timeout(timeoutMs), this.stopping.signal]),
          headers: {
            'content-type': 'application/json',
            'user-agent': 'agentd-webhooks',
            'webhook-id': claimed.value.delivery_id,
            'webhook-timestamp': String(ts),
            'webhook-signature': signWebhook(target.secret, claimed.value.delivery_id, ts, claimed.value.body),
          },
          body: claimed.value.body,
        });
        statusCode = res.status;
        await res.body?.cancel().catch(() => undefined); // the answer's body is not read; a body already closed is fine
        if (res.status >= 200 && res.status < 300) result = 'success';
        else {
          result = 'http_error';
          error = `HTTP ${res.status}`;
        }
      } catch (err) {
        const e = err as Error;
        result = e.name === 'TimeoutError' || e.name === 'AbortError' ? 'timeout' : 'network_error';
        error =
          result === 'timeout'
            ? `no answer within ${this.w.timeout_seconds} s`
            : String((e as { cause?: { code?: string } }).cause?.code ?? e.message).slice(0, 200);
      }
    }
    const endedMs = this.o.clock.now();
    this.attemptsTotal.inc({ result });
    this.seconds.observe((endedMs - startedMs) / 1000);
    const v = claimed.value;
    const log = this.log.child({ delivery_id: v.delivery_id, run_id: v.run_id });
    const history = [...v.history, { at: new Date(startedMs).toISOString(), status_code: statusCode, error, duration_ms: endedMs - startedMs }].slice(
      -MAX_HISTORY,
    );
    const expired = endedMs - Date.parse(v.created_at) >= this.w.retry_hours * 3_600_000 || !target;
    const status: DeliveryValue['status'] = result === 'success' ? 'delivered' : expired ? 'failed' : 'pending';
    const next: DeliveryValue = {
      ...v,
      status,
      history,
      last_attempt_at: new Date(startedMs).toISOString(),
      last_status_code: statusCode,
      last_error: error,
      next_attempt_at: new Date(status === 'pending' ? endedMs + this.backoffMs(v.attempts) : endedMs).toISOString(),
      delivered_at: result === 'success' ? new Date(endedMs).toISOString() : null,
    };
    try {
      await repos(this.o.store).webhookDeliveries.update(v.delivery_id, next, claimed.version, { status, run_id: v.run_id });
    } catch (err) {
      if (!this.stopped) log.warn({ err: String(err) }, 'webhook delivery result not saved');
      return;
    }
    if (status !== 'pending') this.delivered.inc({ outcome: status });
    if (status === 'failed') log.warn({ url: v.url, attempts: v.attempts, last_error: error }, 'webhook delivery failed for good');
  }

  private targetOf(v: DeliveryValue): { url: string; secret: string } | null {
    if (v.endpoint === 'request') {
      const secret = this.w.request_signing_secret;
      return secret && this.w.allow_request_hosts.length > 0 ? { url: v.url, secret } : null;
    }
    const e = this.w.endpoints.find((x) => endpointIdOf(x.url) === v.endpoint);
    return e ? { url: e.url, secret: e.signing_secret } : null;
  }

  /** Hourly: ended deliveries older than `retention_days` go, with the per-request URLs of their runs. */
  private async retention(): Promise<void> {
    const now = this.o.clock.now();
    if (now - this.lastRetention < 3_600_000) return;
    this.lastRetention = now;
    const cutoff = new Date(now - this.w.retention_days * 86_400_000).toISOString();
    for (const status of ['delivered', 'failed'] as const) {
      let deleted = 0;
      const page = await repos(this.o.store).webhookDeliveries.list<DeliveryValue>({ index: { name: 'status', value: status }, limit: 1000 });
      for (const r of page.items) {
        if (r.value.created_at >= cutoff) break;
        await repos(this.o.store)
          .webhookDeliveries.delete(r.id, r.version)
          .then(
            () => deleted++,
            () => undefined,
          );
        if (r.value.endpoint === 'request' && r.value.run_id)
          await repos(this.o.store)
            .webhookSubs.delete(r.value.run_id)
            .catch(swallow('webhooks.retention_subs', { run_id: r.value.run_id }));
      }
      void deleted;
    }
  }

  // ------------------------------------------------------------------ reads

  async list(q: { status?: DeliveryValue['status']; run_id?: string; limit: number; cursor?: string | null }) {
    const index = q.run_id ? { name: 'run_id', value: q.run_id } : q.status ? { name: 'status', value: q.status } : undefined;
    const page = await repos(this.o.store).webhookDeliveries.list<DeliveryValue>({ index, cursor: q.cursor ?? null, limit: q.limit });
    const total = await repos(this.o.store).webhookDeliveries.count(index);
    const items = page.items.map((i) => i.value).filter((v) => !q.status || v.status === q.status);
    return { deliveries: items.map(publicDelivery), total, next_cursor: page.next_cursor };
  }
}
