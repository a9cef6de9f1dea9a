import type { Config } from '../config.js';
import type { Store } from '../store/store.js';
import type { Runtime } from '../runtime/runtime.js';

/** What every route module receives. Routes read the store or call a runtime service; nothing else. */
export interface AppDeps {
  config: Config;
  store: Store;
  runtime: Runtime;
  version: string;
  /** The process's logger (src/telemetry/logger.ts); built from the environment when absent. */
  logger?: import('../telemetry/logger.js').Logger;
  /** A line per request received and answered (AGENTD_LOG_REQUESTS=1). */
  logRequests?: boolean;
  authEnabled?: boolean;
}

export type RouteModule = (app: import('fastify').FastifyInstance, deps: AppDeps) => void;
