import type { FastifyInstance } from 'fastify';
import { HealthResponse, MetricsResponse, ReadinessResponse } from '../schemas/index.js';
import type { AppDeps } from './deps.js';

export function healthRoutes(app: FastifyInstance, deps: AppDeps): void {
  const { runtime } = deps;
  app.get('/health', { schema: { tags: ['service'], summary: 'Liveness', response: { 200: HealthResponse } } }, async () => ({
    status: runtime.isHealthy() ? 'healthy' : 'unhealthy',
    agent_name: runtime.agentName,
    uptime: runtime.uptimeSeconds(),
    version: deps.version,
  }));
  app.get('/ready', { schema: { tags: ['service'], summary: 'Readiness (always HTTP 200)', response: { 200: ReadinessResponse } } }, async () => runtime.readiness());
  app.get('/metrics', { schema: { tags: ['service'], summary: 'Run metrics', response: { 200: MetricsResponse } } }, async () => runtime.metrics.snapshot());
  app.get('/metrics/prometheus', { schema: { tags: ['service'], summary: 'Prometheus text exposition' } }, async (_req, reply) => {
    reply.header('content-type', runtime.metrics.prometheusContentType);
    return runtime.metrics.prometheusText();
  });
}
