import { HealthResponse, MetricsResponse, ReadinessResponse } from '../schemas/index.js';
import type { AppDeps, ZodApp } from './deps.js';

const PROMETHEUS_TEXT = { description: 'Prometheus text exposition format 0.0.4.', content: { 'text/plain': { schema: { type: 'string' } } } };

export function healthRoutes(app: ZodApp, deps: AppDeps): void {
  const { runtime } = deps;
  app.get('/health', { schema: { operationId: 'getHealth', tags: ['service'], summary: 'Liveness', response: { 200: HealthResponse } } }, async () => ({
    status: runtime.isHealthy() ? 'healthy' : 'unhealthy',
    agent_name: runtime.agentName,
    uptime: runtime.uptimeSeconds(),
    version: deps.version,
  }));
  app.get(
    '/ready',
    { schema: { operationId: 'getReadiness', tags: ['service'], summary: 'Readiness (always HTTP 200)', response: { 200: ReadinessResponse } } },
    async () => runtime.readiness(),
  );
  app.get('/metrics', { schema: { operationId: 'getMetrics', tags: ['service'], summary: 'Run metrics', response: { 200: MetricsResponse } } }, async () =>
    runtime.metrics.snapshot(),
  );
  app.get(
    '/metrics/prometheus',
    { schema: { operationId: 'getPrometheusMetrics', tags: ['service'], summary: 'Prometheus text exposition', response: { 200: PROMETHEUS_TEXT } } },
    async (_req, reply) => {
      reply.header('content-type', runtime.metrics.prometheusContentType);
      return runtime.metrics.prometheusText();
    },
  );
}
