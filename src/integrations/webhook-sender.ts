// Completion webhooks, step 2 (docs/webhooks.md): the SENDER posts pending deliveries of the
// outbox, at most `max_concurrent` at a time, each within `timeout_seconds`, signed per Standard
// Webhooks (webhook-id / webhook-timestamp / webhook-signature: v1,<base64 HMAC-SHA256 of
// `${id}.${timestamp}.${body}`>). A delivery is claimed (compare-and-swap) before it is sent, so
// instances sharing a store do not both send it. Failures are retried with exponential backoff
// for `retry_hours` (24 h), then `failed`. At least once: a receiver deduplicates on webhook-id,
// which is stable across retries. Its metrics: agentd_webhook_* on the runtime's registry.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { Config } from '../config.js';
import type { Clock } from '../clock.js';
import { isStoreError, type Page, type Store, type Versioned } from '../store/store.js';
import { repos } from '../store/repos/index.js';
import type { AppLogger } from '../telemetry/logger.js';
import { reportSwallowed, swallow } from '../telemetry/swallowed.js';
import { deliveryIndexes, endpointIdOf, signWebhook, type DeliveryValue } from './webhook-events.js';

/** Pending deliveries looked at per send round at most. */
const SCAN_MAX = 2000;
/** Attempts kept per delivery (the newest). */
const MAX_HISTORY = 10;

export interface WebhookSenderDeps {
  store: Store;
  clock: Clock;
  webhooks: Config['webhooks'];
  registry: Registry;
  logger: AppLogger;
  /** Aborts the attempts in flight when the service stops (their claims are released at the next start). */
  stopping: AbortSignal;
  /** An attempt ended: look at the outbox again. */
  kick(): void;
}

export class WebhookSender {
  private readonly w: Config['webhooks'];
  private readonly inflight = new Set<string>();
  /** Something changed in the outbox since the last scan (new deliveries, an attempt ended). */
  private dirty = true;
  /** Earliest next_attempt_at seen by the last scan. */
  private earliestDue = 0;
  private readonly delivered: Counter;
  private readonly attemptsTotal: Counter;
  private readonly seconds: Histogram;

  constructor(private readonly d: WebhookSenderDeps) {
    this.w = d.webhooks;
    this.delivered = new Counter({
      name: 'agentd_webhook_deliveries_total',
      help: 'Webhook deliveries ended, by outcome (delivered, failed)',
      labelNames: ['outcome'],
      registers: [d.registry],
    });
    this.attemptsTotal = new Counter({
      name: 'agentd_webhook_attempts_total',
      help: 'Webhook delivery attempts, by result (success, http_error, network_error, timeout)',
      labelNames: ['result'],
      registers: [d.registry],
    });
    this.seconds = new Histogram({
      name: 'agentd_webhook_attempt_duration_seconds',
      help: 'Webhook delivery attempt duration',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [d.registry],
    });
    const pending: Gauge = new Gauge({
      name: 'agentd_webhook_deliveries_pending',
      help: 'Webhook deliveries waiting to be sent or retried, from the store',
      registers: [d.registry],
      collect: async () => {
        const n = await repos(d.store)
          .webhookDeliveries.count({ name: 'status', value: 'pending' })
          .catch((e: unknown) => (reportSwallowed('webhooks.scrape_pending', e), null));
        if (n !== null) pending.set(n);
      },
    });
  }

  /** New deliveries were written: the next round scans the outbox. */
  markDirty(): void {
    this.dirty = true;
  }

  /** A single-process store at start: whatever a dead process had claimed is free now. */
  async releaseClaims(): Promise<void> {
    let cursor: string | null = null;
    const now = new Date(this.d.clock.now()).toISOString();
    do {
      const page: Page<DeliveryValue> = await repos(this.d.store).webhookDeliveries.list<DeliveryValue>({
        index: { name: 'status', value: 'pending' },
        cursor,
        limit: 500,
      });
      for (const r of page.items) {
        if (r.value.next_attempt_at > now && r.value.attempts > 0 && r.value.last_attempt_at === null) {
          await repos(this.d.store)
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

  /** Starts an attempt for each due delivery, up to `max_concurrent` in flight. */
  async sendDue(): Promise<void> {
    const room = this.w.max_concurrent - this.inflight.size;
    if (room <= 0) return;
    const now = this.d.clock.now();
    // Nothing new and nothing due yet: no scan (a receiver that is down can leave thousands of
    // deliveries backing off; they are not re-read on every event).
    if (!this.dirty && now < this.earliestDue) return;
    this.dirty = false;
    let earliest = Number.POSITIVE_INFINITY;
    const due: Array<Versioned<DeliveryValue>> = [];
    let cursor: string | null = null;
    // Oldest first, at most SCAN_MAX records a round: a bounded walk, the rest next round.
    for (let scanned = 0; scanned < SCAN_MAX && due.length < room;) {
      const page: Page<DeliveryValue> = await repos(this.d.store).webhookDeliveries.list<DeliveryValue>({
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
        .catch((err: unknown) => this.d.logger.warn({ delivery_id: r.id, err: String(err) }, 'webhook attempt failed'))
        .finally(() => {
          this.inflight.delete(r.id);
          this.dirty = true;
          this.d.kick();
        });
    }
  }

  /** One attempt: claim (CAS), post, record the result. */
  private async attempt(rec: Versioned<DeliveryValue>): Promise<void> {
    const timeoutMs = this.w.timeout_seconds * 1000;
    const startedMs = this.d.clock.now();
    // The claim: nobody else sends it until the attempt's time is up. `last_attempt_at: null`
    // marks a claim whose result was never written (a crash): released at the next start.
    let claimed: Versioned<DeliveryValue>;
    try {
      claimed = await repos(this.d.store).webhookDeliveries.update(
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
    const { statusCode, error, result } = target
      ? await this.post(target, claimed.value, startedMs, timeoutMs)
      : { statusCode: null, error: 'the receiver is no longer configured', result: 'network_error' as const };
    const endedMs = this.d.clock.now();
    this.attemptsTotal.inc({ result });
    this.seconds.observe((endedMs - startedMs) / 1000);
    const v = claimed.value;
    const log = this.d.logger.child({ delivery_id: v.delivery_id, run_id: v.run_id });
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
      await repos(this.d.store).webhookDeliveries.update(v.delivery_id, next, claimed.version, deliveryIndexes(next));
    } catch (err) {
      if (!this.d.stopping.aborted) log.warn({ err: String(err) }, 'webhook delivery result not saved');
      return;
    }
    if (status !== 'pending') this.delivered.inc({ outcome: status });
    if (status === 'failed') log.warn({ url: v.url, attempts: v.attempts, last_error: error }, 'webhook delivery failed for good');
  }

  /** The signed POST; its answer's body is not read. */
  private async post(
    target: { url: string; secret: string },
    v: DeliveryValue,
    startedMs: number,
    timeoutMs: number,
  ): Promise<{ statusCode: number | null; error: string | null; result: 'success' | 'http_error' | 'network_error' | 'timeout' }> {
    const ts = Math.floor(startedMs / 1000);
    try {
      const res = await fetch(target.url, {
        method: 'POST',
        redirect: 'manual', // a redirect could lead anywhere (SSRF): it is a failure
        signal: AbortSignal.any([AbortSignal.timeout(timeoutMs), this.d.stopping]),
        headers: {
          'content-type': 'application/json',
          'user-agent': 'agentd-webhooks',
          'webhook-id': v.delivery_id,
          'webhook-timestamp': String(ts),
          'webhook-signature': signWebhook(target.secret, v.delivery_id, ts, v.body),
        },
        body: v.body,
      });
      await res.body?.cancel().catch(() => undefined); // the answer's body is not read; a body already closed is fine
      if (res.status >= 200 && res.status < 300) return { statusCode: res.status, error: null, result: 'success' };
      return { statusCode: res.status, error: `HTTP ${res.status}`, result: 'http_error' };
    } catch (err) {
      const e = err as Error;
      const timedOut = e.name === 'TimeoutError' || e.name === 'AbortError';
      return {
        statusCode: null,
        result: timedOut ? 'timeout' : 'network_error',
        error: timedOut ? `no answer within ${this.w.timeout_seconds} s` : String((e as { cause?: { code?: string } }).cause?.code ?? e.message).slice(0, 200),
      };
    }
  }

  private targetOf(v: DeliveryValue): { url: string; secret: string } | null {
    if (v.endpoint === 'request') {
      const secret = this.w.request_signing_secret;
      return secret && this.w.allow_request_hosts.length > 0 ? { url: v.url, secret } : null;
    }
    const e = this.w.endpoints.find((x) => endpointIdOf(x.url) === v.endpoint);
    return e ? { url: e.url, secret: e.signing_secret } : null;
  }
}
