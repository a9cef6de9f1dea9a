// Completion webhooks: the service's face of them.
//
// Durable from end to end, and never in a run's way: a run's end (or pause for a person) is
// already in the event log before the run reads as ended. One pump, woken by those events and by
// an idle poll, runs the two steps in turn:
//  1. the DISPATCHER (webhook-dispatch.ts): event log -> one delivery record per receiver (the
//     outbox), in the commit that moves its cursor;
//  2. the SENDER (webhook-sender.ts): outbox -> signed POSTs, claimed by CAS, retried with backoff.
// This file holds the pump (start, stop, kick), the per-request URL rules, the hourly retention
// of ended deliveries and the reads; the pure parts (which events, the record, signing, URL
// rules) are in webhook-events.ts.
//
// Secrets (the signing keys) live only in the resolved config (non-enumerable): never in a
// delivery record, a log line or telemetry.
import type { Registry } from 'prom-client';
import type { Config } from '../config.js';
import type { Clock } from '../clock.js';
import { HttpValidationFailure } from '../errors.js';
import { isStoreError, type Store } from '../store/store.js';
import type { EventBus } from '../telemetry/bus.js';
import { repos } from '../store/repos/index.js';
import { TRIGGERS, hostAllowed, publicDelivery, type DeliveryValue, type SubValue } from './webhook-events.js';
import { WebhookDispatcher } from './webhook-dispatch.js';
import { WebhookSender } from './webhook-sender.js';
import { swallow } from '../telemetry/swallowed.js';
import { silentLogger, type AppLogger } from '../telemetry/logger.js';

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
  private readonly dispatcher: WebhookDispatcher;
  private readonly sender: WebhookSender;
  private timer: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void) | null = null;
  private running = false;
  private stopped = false;
  /** Aborts the attempts in flight when the service stops (their claims are released at the next start). */
  private readonly stopping = new AbortController();
  private pumping: Promise<void> | null = null;
  private again = false;
  private lastRetention = 0;
  private readonly log: AppLogger;

  constructor(private readonly o: WebhooksOptions) {
    this.w = o.config.webhooks;
    this.log = o.logger ?? silentLogger;
    this.dispatcher = new WebhookDispatcher({ store: o.store, clock: o.clock, webhooks: this.w, stopped: () => this.stopped });
    this.sender = new WebhookSender({
      store: o.store,
      clock: o.clock,
      webhooks: this.w,
      registry: o.registry,
      logger: this.log,
      stopping: this.stopping.signal,
      kick: () => this.kick(),
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
    await this.dispatcher.initCursor();
    // A single-process store: whatever a dead process had claimed is free now.
    if (!this.o.store.capabilities.sharedByInstances) await this.sender.releaseClaims();
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
          if (await this.dispatcher.dispatch()) this.sender.markDirty();
          await this.sender.sendDue();
          await this.retention();
        } catch (err) {
          if (!this.stopped) this.log.warn({ err: String(err) }, 'webhook round failed');
        }
      } while (this.again && !this.stopped);
    })().finally(() => {
      this.pumping = null;
    });
  }

  /** Hourly: ended deliveries older than `retention_days` go, with the per-request URLs of their runs. */
  private async retention(): Promise<void> {
    const now = this.o.clock.now();
    if (now - this.lastRetention < 3_600_000) return;
    this.lastRetention = now;
    const cutoff = new Date(now - this.w.retention_days * 86_400_000).toISOString();
    // Another instance's retention may have deleted a record first: that is not a failure.
    const gone = (e: unknown) => isStoreError(e, 'stale_version') || isStoreError(e, 'not_found');
    for (const status of ['delivered', 'failed'] as const) {
      const page = await repos(this.o.store).webhookDeliveries.list<DeliveryValue>({ index: { name: 'status', value: status }, limit: 1000 });
      for (const r of page.items) {
        if (r.value.created_at >= cutoff) break;
        await repos(this.o.store)
          .webhookDeliveries.delete(r.id, r.version)
          .catch(swallow('webhooks.retention_delete', { delivery_id: r.id }, gone));
        if (r.value.endpoint === 'request' && r.value.run_id)
          await repos(this.o.store)
            .webhookSubs.delete(r.value.run_id)
            .catch(swallow('webhooks.retention_subs', { run_id: r.value.run_id }));
      }
    }
  }

  // ------------------------------------------------------------------ reads

  /**
   * GET /webhooks/deliveries. `tenant` (undefined: every tenant's) narrows to one tenant's
   * deliveries: it walks the tenant's own indexes, and a run's deliveries are all of its tenant,
   * so another tenant's run id lists nothing and counts 0.
   */
  async list(q: { status?: DeliveryValue['status']; run_id?: string; limit: number; cursor?: string | null }, tenant?: string | null) {
    const mine = (v: DeliveryValue) => tenant === undefined || (v.tenant ?? null) === tenant;
    const index = q.run_id
      ? { name: 'run_id', value: q.run_id }
      : q.status
        ? tenant === undefined
          ? { name: 'status', value: q.status }
          : { name: 'tenant_status', value: `${tenant ?? ''}|${q.status}` }
        : tenant === undefined
          ? undefined
          : { name: 'tenant', value: tenant ?? '' };
    const repo = repos(this.o.store).webhookDeliveries;
    const page = await repo.list<DeliveryValue>({ index, cursor: q.cursor ?? null, limit: q.limit });
    const items = page.items.map((i) => i.value).filter((v) => (!q.status || v.status === q.status) && mine(v));
    const foreign = q.run_id !== undefined && tenant !== undefined && page.items.length > 0 && !mine(page.items[0].value);
    const total = foreign ? 0 : await repo.count(index);
    return { deliveries: items.map(publicDelivery), total, next_cursor: foreign ? null : page.next_cursor };
  }
}
