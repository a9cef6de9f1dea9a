import type {
  FastifyBaseLogger,
  FastifyInstance,
  FastifyTypeProvider,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';
import type { $ZodType, output } from 'zod/v4/core';
import type { Config } from '../config.js';
import type { Store } from '../store/store.js';
import type { Runtime } from '../composition-root.js';

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

/**
 * The zod type provider for requests: a handler's `request.body/params/query/headers` have the
 * output types of the route's zod schemas, which src/http/validation.ts zodValidatorCompiler
 * parses (defaults filled in) before the handler runs. The request half of
 * @fastify/type-provider-zod's ZodTypeProvider; replies stay untyped because they are serialised
 * with plain JSON.stringify (validation.ts jsonSerializerCompiler) and checked against the response
 * schemas by the tests (test/schemas), not re-typed per route.
 */
export interface ZodRequestTypeProvider extends FastifyTypeProvider {
  validator: this['schema'] extends $ZodType ? output<this['schema']> : unknown;
  serializer: unknown;
}

/** The Fastify instance route modules register on (src/http/routes.ts registerApiRoutes). */
export type ZodApp = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, ZodRequestTypeProvider>;

export type RouteModule = (app: ZodApp, deps: AppDeps) => void;
