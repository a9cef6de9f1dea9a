// Completion webhooks (docs/webhooks.md): the per-request `webhook` field and GET /webhooks/deliveries.
import { z } from 'zod';
import { WEBHOOK_EVENTS } from '../config-schema.js';
import { Cursor, IsoDateTime, QueryId, queryInt } from './common.js';

/** A per-request receiver; allowed only for hosts the operator lists (webhooks.allow_request_hosts). */
export const WebhookUrl = z
  .string()
  .max(2048)
  .regex(/^https?:\/\/[^\s]+$/i, { error: 'must be an absolute http(s) URL' })
  .meta({
    id: 'WebhookUrl',
    description:
      "Receiver of this run's webhooks (run.* and background_run.* events), signed with webhooks.request_secret. The host must be listed in webhooks.allow_request_hosts (else 422).",
  });

export const WebhookEventType = z.enum(WEBHOOK_EVENTS).meta({ id: 'WebhookEventType' });
export const WebhookDeliveryStatus = z.enum(['pending', 'delivered', 'failed']).meta({ id: 'WebhookDeliveryStatus' });

export const WebhookAttempt = z
  .object({
    at: IsoDateTime,
    status_code: z.number().int().nullable(),
    error: z.string().nullable(),
    duration_ms: z.number().nonnegative(),
  })
  .meta({ id: 'WebhookAttempt' });

export const WebhookDelivery = z
  .object({
    delivery_id: z.string().describe('Stable across retries: the webhook-id header, for deduplication.'),
    event_type: WebhookEventType,
    endpoint: z.string().describe("`config:<id>` (a configured receiver) or `request` (the run's own URL)."),
    url: z.string(),
    run_id: z.string().nullable(),
    session_id: z.string().nullable(),
    task_id: z.string().nullable(),
    status: WebhookDeliveryStatus,
    attempts: z.number().int().nonnegative(),
    next_attempt_at: IsoDateTime,
    last_attempt_at: IsoDateTime.nullable(),
    last_status_code: z.number().int().nullable(),
    last_error: z.string().nullable(),
    history: z.array(WebhookAttempt).describe('The newest attempts (at most 10).'),
    created_at: IsoDateTime,
    delivered_at: IsoDateTime.nullable(),
    tenant: z.string().optional().describe('The tenant of the run it is about (docs/multi-tenant.md); absent: none.'),
  })
  .meta({ id: 'WebhookDelivery' });

export const WebhookDeliveriesQuery = z.object({
  status: WebhookDeliveryStatus.optional(),
  run_id: QueryId.optional(),
  limit: queryInt(1, 500, 100),
  cursor: Cursor.optional(),
});
export type WebhookDeliveriesQuery = z.infer<typeof WebhookDeliveriesQuery>;

export const WebhookDeliveriesResponse = z
  .object({
    deliveries: z.array(WebhookDelivery),
    total: z.number().int().nonnegative(),
    next_cursor: z.string().nullable(),
  })
  .meta({ id: 'WebhookDeliveriesResponse' });
