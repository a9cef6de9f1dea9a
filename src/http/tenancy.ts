// Which tenant a request acts in, and the routes a tenant may call (docs/multi-tenant.md).
//
// A tenant key acts in its tenant; a global key (or any request without auth) acts in the
// no-tenant namespace and sees every tenant, or acts in one tenant with `x-agentd-tenant`. Records
// are stamped and filtered below the routes (src/runtime/tenancy.ts, the run service, the
// telemetry queries); this file decides the scope once per request and refuses, fail closed, every
// route that does not keep tenants apart yet: a route missing from TENANT_ROUTES answers 403
// AGT_ERR_TENANT_ROUTE to a request acting in a tenant, so a new route is never open across
// tenants by omission (test/http/tenants.test.ts walks the OpenAPI document to check it).
import type { FastifyInstance, FastifyRequest, preHandlerAsyncHookHandler, preValidationHookHandler } from 'fastify';
import type { AppDeps } from './deps.js';
import { accessOf } from './auth.js';
import { domainError, HttpValidationFailure } from '../errors.js';
import { GLOBAL_SCOPE, type TenantScope } from '../runtime/tenancy.js';

const TENANT_HEADER = 'x-agentd-tenant';
const TENANT_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * Routes that keep tenants apart (`METHOD pattern` as registered): their records are stamped with
 * the caller's tenant and their reads filtered by it. Public routes carry no tenant data.
 */
export const TENANT_ROUTES: ReadonlySet<string> = new Set([
  'POST /run',
  'POST /run/sync',
  'GET /runs',
  'GET /runs/:run_id',
  'POST /runs/:run_id/approvals/:approval_id',
  'GET /runs/:run_id/budget',
  'POST /runs/:run_id/budget',
  'POST /runs/:run_id/outcome',
  'POST /runs/:run_id/resume',
  'POST /runs/:run_id/cancel',
  'POST /runs/:run_id/steer',
  'POST /runs/:run_id/interrupt',
  'GET /runs/:run_id/inbox',
  'GET /sessions/:session_id/history',
  'DELETE /sessions/:session_id',
  'GET /telemetry/events',
  'GET /telemetry/events/stream',
  'GET /telemetry/traces',
  'GET /telemetry/traces/:trace_id',
  'GET /telemetry/runs/:run_id/trace',
  'GET /telemetry/sessions/:session_id/trace',
  'GET /events/:session_id',
  'GET /events/:session_id/list',
  'GET /events/:session_id/trace',
  // Background agents, tasks and runs (src/background/tenancy.ts): a tenant's task and agent ids
  // are keys in its namespace; shared agents (a global key's) are run and read by every tenant.
  'POST /background/agents',
  'GET /background/agents',
  'GET /background/agents/:agent_id',
  'DELETE /background/agents/:agent_id',
  'POST /background/tasks',
  'GET /background/tasks',
  'GET /background/tasks/:task_id',
  'PATCH /background/tasks/:task_id',
  'DELETE /background/tasks/:task_id',
  'GET /background/tasks/:task_id/status',
  'GET /background/tasks/:task_id/schedule',
  'POST /background/tasks/:task_id/run',
  'POST /background/tasks/:task_id/runs',
  'POST /background/tasks/:task_id/pause',
  'POST /background/tasks/:task_id/resume',
  'GET /background/runs',
  'GET /background/runs/:run_id',
  'GET /background/runs/:run_id/attempts',
  'GET /background/runs/:run_id/events',
  'GET /background/runs/:run_id/workspace',
  'GET /background/runs/:run_id/workspace/files/*',
  'POST /background/runs/:run_id/cancel',
  'POST /background/runs/:run_id/resume',
  'GET /background/status',
  // Deliveries carry the tenant of their run's events (src/integrations/webhook-events.ts).
  'GET /webhooks/deliveries',
  // Checkpoints, forks and replays of a run (the run_id hook below refuses another tenant's; a
  // fork or replay is its original's tenant's, src/runtime/debug/runs-debug.ts), comparisons (both
  // runs checked), and evaluations (stamped, filtered; they select the tenant's runs only).
  'GET /runs/:run_id/checkpoints',
  'GET /runs/:run_id/checkpoints/:checkpoint_id',
  'POST /runs/:run_id/fork',
  'POST /runs/:run_id/replay',
  'GET /runs/:a/compare/:b',
  'POST /evals',
  'GET /evals',
  'GET /evals/:eval_id',
  'POST /evals/:eval_id/cancel',
  'DELETE /evals/:eval_id',
  // The protocol adapters (src/protocols/): runs they start are the request's tenant's, sessions
  // (threads, chat ids, contexts) are looked up in its namespace, runs named by id are checked as
  // GET /runs/{id} does, and the agents they list or run are the tenant's own and the shared ones.
  'POST /ai-sdk/chat',
  'GET /ai-sdk/chat/:id/stream',
  'POST /ag-ui',
  'POST /a2a',
  'POST /mcp',
  'GET /mcp',
  'DELETE /mcp',
  'POST /v1/chat/completions',
  'GET /v1/models',
  // No records in them: the configuration's tools and the machines' definitions.
  'GET /tools',
  // A dry run of the rules: a tenant's key evaluates in its own tenant.
  'POST /governance/evaluate',
  'GET /machines',
  // The caller's own key: its name, role and tenant.
  'GET /whoami',
]);

declare module 'fastify' {
  interface FastifyRequest {
    /** The tenant scope of the request (set on every route before its handler). */
    tenantScope: TenantScope;
  }
}

/** The scope a request acts in; throws 403/422 for a header it may not send. */
export function scopeOf(request: FastifyRequest): TenantScope {
  const own = request.apiKeyTenant;
  const raw = request.headers[TENANT_HEADER];
  const header = typeof raw === 'string' && raw.length > 0 ? raw : undefined;
  if (header !== undefined && !TENANT_PATTERN.test(header))
    throw new HttpValidationFailure([{ loc: ['header', TENANT_HEADER], msg: 'must be 1-64 characters of A-Z a-z 0-9 _ . -', type: 'value_error' }]);
  if (own !== undefined) {
    if (header !== undefined && header !== own) throw domainError('AGT_ERR_TENANT_MISMATCH', [own, header]);
    return { tenant: own, all: false };
  }
  return header !== undefined ? { tenant: header, all: false } : GLOBAL_SCOPE;
}

/** The tenant a request's new records are stamped with (null: none). */
export const tenantOf = (request: FastifyRequest): string | null => request.tenantScope.tenant;

/**
 * Sets `request.tenantScope` on every route before its validation and handler (the auth check ran
 * in onRequest), and refuses a request acting in a tenant on a protected route outside
 * TENANT_ROUTES. Public routes (health, documentation, the dashboard's files) hold no records.
 */
export function installTenancy(app: FastifyInstance, deps: AppDeps): void {
  // Set by every route's check below before anything reads it (a reference type cannot be a default).
  app.decorateRequest('tenantScope', null as unknown as TenantScope);
  app.addHook('onRoute', (route) => {
    const pattern = route.url;
    // Every route about one run (decisions, steering, its budget, its trace): another tenant's run
    // answers the 404 of a run that does not exist, before the handler does anything (one read,
    // only for a request acting in a tenant; a run's tenant never changes).
    if (/\/:run_id(\/|$)/.test(pattern) && !pattern.startsWith('/background/')) {
      const ownRun: preHandlerAsyncHookHandler = async (request) => {
        if (request.tenantScope.all) return;
        // The pattern has :run_id, so the matched (and validated) params hold it.
        const params: unknown = request.params;
        if (typeof params !== 'object' || params === null || !('run_id' in params) || typeof params.run_id !== 'string') return;
        await deps.runtime.runs.get(params.run_id, request.tenantScope);
      };
      route.preHandler = route.preHandler ? [ownRun, ...[route.preHandler].flat()] : ownRun;
    }
    // The same for every route about one background run (its tenant is its task's).
    if (pattern.startsWith('/background/runs/:run_id')) {
      const fileRoute = pattern.includes('/workspace/files/');
      const ownBgRun: preHandlerAsyncHookHandler = async (request) => {
        await deps.runtime.background.runs.checkVisible((request.params as { run_id: string }).run_id, request.tenantScope, fileRoute);
      };
      route.preHandler = route.preHandler ? [ownBgRun, ...[route.preHandler].flat()] : ownBgRun;
    }
    const check: preValidationHookHandler = (request, _reply, done) => {
      try {
        const scope = scopeOf(request);
        request.tenantScope = scope;
        const m = request.method === 'HEAD' ? 'GET' : request.method;
        if (scope.tenant !== null && accessOf(m, pattern) !== 'public' && !TENANT_ROUTES.has(`${m} ${pattern}`))
          throw domainError('AGT_ERR_TENANT_ROUTE', [m, pattern]);
      } catch (err) {
        return done(err as Error);
      }
      done();
    };
    route.preValidation = route.preValidation ? [check, ...[route.preValidation].flat()] : check;
  });
}
