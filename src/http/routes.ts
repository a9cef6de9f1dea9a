import type { FastifyInstance } from 'fastify';
import type { AppDeps, RouteModule, ZodRequestTypeProvider } from './deps.js';
import { healthRoutes } from './health.js';
import { backgroundRoutes } from './background.js';
import { runRoutes } from './runs.js';
import { serviceInfoRoutes } from './service-info.js';
import { steerRoutes } from './steer.js';
import { debugRoutes } from './debug.js';
import { evalRoutes } from './evals.js';
import { telemetryRoutes } from './telemetry.js';
import { webhookRoutes } from './webhooks.js';
import { governanceRoutes } from './governance.js';
import { a2aRoutes } from '../protocols/a2a/routes.js';
import { mcpRoutes } from '../protocols/mcp/routes.js';
import { openaiRoutes } from '../protocols/openai/routes.js';
import { aiSdkRoutes } from '../protocols/ai-sdk/routes.js';
import { agUiRoutes } from '../protocols/ag-ui/routes.js';

/** Every route module, in registration order. Adding a resource = one line here. */
export const ROUTE_MODULES: RouteModule[] = [
  runRoutes,
  steerRoutes,
  debugRoutes,
  evalRoutes,
  serviceInfoRoutes,
  governanceRoutes,
  telemetryRoutes,
  backgroundRoutes,
  webhookRoutes,
  openaiRoutes,
  mcpRoutes,
  a2aRoutes,
  aiSdkRoutes,
  agUiRoutes,
];

/**
 * Every API route, for the main app (src/app.ts) and the documentation instance
 * (src/http/docs-app.ts), which registers the same ones. Here rather than in app.ts, so that
 * docs-app.ts does not import app.ts (app.ts → http/docs.ts → http/docs-app.ts was an import circle).
 */
export function registerApiRoutes(scope: FastifyInstance, deps: AppDeps): void {
  const app = scope.withTypeProvider<ZodRequestTypeProvider>();
  healthRoutes(app, deps);
  for (const register of ROUTE_MODULES) register(app, deps);
}
