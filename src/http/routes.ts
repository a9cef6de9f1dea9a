import type { RouteModule } from './deps.js';
import { backgroundRoutes } from './background.js';
import { runRoutes } from './runs.js';
import { serviceInfoRoutes } from './service-info.js';
import { steerRoutes } from './steer.js';
import { telemetryRoutes } from './telemetry.js';
import { webhookRoutes } from './webhooks.js';

/** Every route module, in registration order. Adding a resource = one line here. */
export const ROUTE_MODULES: RouteModule[] = [runRoutes, steerRoutes, serviceInfoRoutes, telemetryRoutes, backgroundRoutes, webhookRoutes];
