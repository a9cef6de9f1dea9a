import { HTTPValidationError, WebhookDeliveriesQuery, WebhookDeliveriesResponse } from '../schemas/index.js';
import type { AppDeps, ZodApp } from './deps.js';

export function webhookRoutes(app: ZodApp, deps: AppDeps): void {
  app.get(
    '/webhooks/deliveries',
    {
      schema: {
        operationId: 'listWebhookDeliveries',
        tags: ['webhooks'],
        summary: 'Webhook deliveries, oldest first: attempts, failures and what is still pending',
        querystring: WebhookDeliveriesQuery,
        response: { 200: WebhookDeliveriesResponse, 422: HTTPValidationError },
      },
    },
    async (request) => {
      const q = request.query;
      // A request acting in a tenant lists its tenant's deliveries only (docs/multi-tenant.md).
      const scope = request.tenantScope;
      return deps.runtime.webhooks.list({ status: q.status, run_id: q.run_id, limit: q.limit, cursor: q.cursor }, scope.all ? undefined : scope.tenant);
    },
  );
}
