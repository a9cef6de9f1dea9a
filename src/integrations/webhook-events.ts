// Completion webhooks, the pure part (docs/webhooks.md): which stored events make a delivery
// (deriveWebhook), the delivery record, Standard Webhooks signing, the receiver-URL rules. The
// dispatcher and sender that use them are in webhooks.ts.
import { createHash, createHmac } from 'node:crypto';
import { WEBHOOK_EVENTS } from '../config-schema.js';
import type { RecordIndexes, StoredEvent } from '../store/store.js';

export type WebhookEventType = (typeof WEBHOOK_EVENTS)[number];

/** Event log types the dispatcher reads (an index walk; everything else is skipped by the store). */
export const TRIGGER_EVENT_TYPES = [
  'final_answer',
  'runtime_error',
  'guardrail_violation',
  'policy_decision_ask',
  'budget_exhausted',
  'background_run_completed',
  'background_run_failed',
  'background_run_cancelled',
  'background_run_timeout',
  'background_run_skipped',
] as const;
export const TRIGGERS: ReadonlySet<string> = new Set(TRIGGER_EVENT_TYPES);

export interface DeliveryAttempt {
  at: string;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
}

export interface DeliveryValue {
  delivery_id: string;
  event_type: WebhookEventType;
  /** `config:<sha256(url) prefix>` or `request` (the run's per-request URL). */
  endpoint: string;
  /** The receiver, without user info. */
  url: string;
  run_id: string | null;
  session_id: string | null;
  task_id: string | null;
  /** The exact JSON body sent (and signed) on every attempt. */
  body: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  next_attempt_at: string;
  last_attempt_at: string | null;
  last_status_code: number | null;
  last_error: string | null;
  history: DeliveryAttempt[];
  created_at: string;
  delivered_at: string | null;
  /** Event-log cursor of the event it was made from. */
  source_cursor: string;
  /** The tenant of the event's run (absent: none; docs/multi-tenant.md). */
  tenant?: string;
}

/**
 * Indexes of a delivery: by status and run, and for a tenant's by tenant and tenant + status (its
 * lists and totals walk its own; deliveries without a tenant pay for no more keys).
 */
export function deliveryIndexes(v: Pick<DeliveryValue, 'status' | 'run_id' | 'tenant'>): RecordIndexes {
  return { status: v.status, run_id: v.run_id, tenant: v.tenant ?? null, tenant_status: v.tenant ? `${v.tenant}|${v.status}` : null };
}

/** The tenant an event was stamped with (its metadata, src/runtime/run-host.ts and src/background/outbox.ts). */
export function eventTenant(ev: StoredEvent): string | undefined {
  const t = (ev.metadata as { tenant?: unknown } | undefined)?.tenant;
  return typeof t === 'string' && t.length > 0 ? t : undefined;
}

export interface SubValue {
  run_id: string;
  url: string;
  created_at: string;
}

/** What a derived webhook says. */
export interface Derived {
  type: WebhookEventType;
  /** Receivers of the same logical event get one delivery each; this keys it. */
  dedupe: string;
  data: Record<string, unknown>;
}

/** Standard Webhooks key bytes: `whsec_<base64>` is decoded, any other text is used as UTF-8. */
export function secretBytes(secret: string): Buffer {
  return secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8');
}

/** `v1,<base64 HMAC-SHA256(secret, "${id}.${timestamp}.${body}")>`. */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  return `v1,${createHmac('sha256', secretBytes(secret)).update(`${id}.${timestampSeconds}.${body}`).digest('base64')}`;
}

/**
 * The URL as stored and listed. A per-request URL is the caller's own (credentials are refused
 * for it) and is where its deliveries go, so it is kept whole. A configured receiver's URL often
 * carries its token in the path or query (Slack-style hooks) and is sent from the config, never
 * from the row: only its origin is stored, so `GET /webhooks/deliveries` (read role) and the log
 * line of a failed delivery cannot show the token; `endpoint` tells configured receivers apart.
 */
export function displayUrl(u: string, configured: boolean): string {
  try {
    const url = new URL(u);
    if (configured) return `${url.origin}/…`;
    url.username = '';
    url.password = '';
    return url.toString();
  } catch {
    return '(invalid url)';
  }
}

export const endpointIdOf = (url: string) => `config:${createHash('sha256').update(url).digest('hex').slice(0, 16)}`;

/** Host allowlist entries: `example.com`, `*.example.com` (subdomains only), `host:port`. */
export function hostAllowed(url: URL, allow: readonly string[]): boolean {
  const host = url.hostname.toLowerCase().replace(/^\[|\]$/g, '');
  const withPort = `${host}:${url.port || (url.protocol === 'https:' ? '443' : '80')}`;
  return allow.some((raw) => {
    const a = raw.toLowerCase();
    if (a.startsWith('*.')) return host.endsWith(a.slice(1)) && host.length > a.length - 1;
    return a.includes(':') && !a.startsWith('[') ? a === withPort || a === `${host}:${url.port}` : a === host;
  });
}

/** Webhook payload of an event from the log, or null when it is not one. */
export function deriveWebhook(ev: StoredEvent): Derived | null {
  const meta = (ev.metadata ?? {}) as Record<string, unknown>;
  const runId = (ev.run_id ?? (meta.run_id as string | undefined) ?? null) as string | null;
  const tenant = eventTenant(ev);
  const base = {
    run_id: runId,
    session_id: ev.session_id ?? (meta.session_id as string | undefined) ?? null,
    task_id: clientTaskId(ev.task_id ?? (meta.task_id as string | undefined) ?? null, tenant),
    // A tenant's run says whose it is (a receiver shared by tenants tells them apart; ids a client
    // chose, such as session_id and task_id, are only unique within a tenant). Runs without a
    // tenant keep the body they always had.
    ...(tenant ? { tenant } : {}),
    trace_id: ev.trace_id ?? null,
    event_id: ev.event_id,
    occurred_at: ev.timestamp,
  };
  const out = ev.output as Record<string, unknown> | undefined;
  switch (ev.event_type) {
    case 'final_answer':
      return { type: 'run.completed', dedupe: ev.event_id, data: { ...base, status: 'completed', response: out?.response ?? null } };
    case 'runtime_error': {
      const status = typeof meta.status === 'string' ? meta.status : 'failed';
      return {
        type: status === 'cancelled' ? 'run.cancelled' : 'run.failed',
        dedupe: ev.event_id,
        data: { ...base, status, termination_reason: meta.termination_reason ?? null, error: ev.error ?? null },
      };
    }
    case 'guardrail_violation':
      // A refused steer message (POST /runs/{id}/steer, 422) is recorded on the run, which goes on.
      if (meta.source === 'steer') return null;
      return { type: 'run.failed', dedupe: ev.event_id, data: { ...base, status: 'blocked', termination_reason: 'guardrail', error: ev.error ?? null } };
    case 'policy_decision_ask':
      // One webhook per paused tool batch, however many of its calls ask (they share the step span).
      return {
        type: 'run.awaiting_approval',
        dedupe: `${runId}|approval|${(ev.parent_span_id as string | null | undefined) ?? ev.event_id}`,
        data: { ...base, status: 'awaiting_approval' },
      };
    case 'budget_exhausted':
      if (meta.on_exhausted !== 'pause') return null;
      return {
        type: 'run.awaiting_budget',
        dedupe: ev.event_id,
        data: {
          ...base,
          status: 'awaiting_budget',
          budget_request: out
            ? { request_id: out.request_id ?? null, scope: out.scope ?? null, meter: out.meter ?? null, shortfall: out.shortfall ?? null }
            : null,
        },
      };
    default:
      if (ev.event_type.startsWith('background_run_') && TRIGGERS.has(ev.event_type)) {
        const what = ev.event_type.slice('background_run_'.length);
        return {
          type: `background_run.${what}` as WebhookEventType,
          dedupe: ev.event_id,
          data: { ...base, status: (meta.status as string | undefined) ?? what, error: ev.error ?? null },
        };
      }
      return null;
  }
}

/**
 * A tenant's task id as its client chose it: inside the background subsystem it is the key
 * `<tenant>~<id>` (src/background/tenancy.ts), which receivers never see.
 */
function clientTaskId(taskId: string | null, tenant: string | undefined): string | null {
  return taskId && tenant && taskId.startsWith(`${tenant}~`) ? taskId.slice(tenant.length + 1) : taskId;
}

export function publicDelivery(v: DeliveryValue) {
  const { body: _b, source_cursor: _c, ...rest } = v;
  void _b;
  void _c;
  return rest;
}
