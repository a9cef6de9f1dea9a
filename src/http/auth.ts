import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from 'fastify';
import { domainError } from '../errors.js';
import type { AppDeps } from './deps.js';

export type Role = 'reader' | 'operator' | 'approver' | 'admin';

/** What a route lets a caller do, and so which roles may call it (docs/contract.md §9). */
export type Access = 'public' | 'read' | 'operate' | 'decide' | 'converse';

const ROLES: Record<Exclude<Access, 'public'>, Role[]> = {
  read: ['reader', 'operator', 'approver', 'admin'],
  operate: ['operator', 'admin'],
  decide: ['approver', 'admin'],
  // A chat protocol's one route both starts runs and answers their approvals (the body says
  // which): the route admits either role, and the handler checks the one the request needs
  // (requireAccess below), so a reader does neither and an operator decides nothing.
  converse: ['operator', 'approver', 'admin'],
};

/**
 * Routes whose access is not the default of their method, keyed by `METHOD pattern` exactly as the
 * route was registered. Authorization looks up the route the router MATCHED, never the URL text:
 * `/runs/R/%61pprovals/A`, `//runs/R/approvals/A/` and `http://x/runs/R/approvals/A` all match the
 * pattern below, while a regex over the raw URL (the old check) missed them. A test fails when a
 * pattern here names no registered route, so renaming a route cannot silently drop its rule.
 */
export const ROUTE_ACCESS: Readonly<Record<string, Access>> = {
  'GET /health': 'public',
  'GET /ready': 'public',
  'GET /openapi.json': 'public',
  'GET /docs': 'public',
  'GET /docs/*': 'public',
  // The dashboard's page and assets: no data, which it fetches with the user's own key.
  'GET /ui': 'public',
  'GET /ui/*': 'public',
  'POST /runs/:run_id/approvals/:approval_id': 'decide',
  'POST /runs/:run_id/budget': 'decide',
  // Talking to a run in flight: operators steer and interrupt; readers see the inbox.
  'POST /runs/:run_id/steer': 'operate',
  'POST /runs/:run_id/interrupt': 'operate',
  'GET /runs/:run_id/inbox': 'read',
  // Delivery attempts and failures: no secret in them (signing keys never leave the config).
  'GET /webhooks/deliveries': 'read',
  // The A2A agent card is public by the protocol (clients read it to learn how to authenticate).
  'GET /.well-known/agent-card.json': 'public',
  // One endpoint carries reads, runs and decisions (JSON-RPC methods, MCP tools): any key gets in,
  // and the adapter checks each method's access with mayAccess() (src/protocols/).
  'POST /a2a': 'read',
  'POST /mcp': 'read',
  // Answered 405 whatever the role (an MCP client ending its session must not see a 403).
  'DELETE /mcp': 'read',
  // The chat protocols (src/protocols/): a run started or a decision sent back in one request
  // (OpenAI-compatible: a tool message decides a paused run).
  'POST /ai-sdk/chat': 'converse',
  'POST /ag-ui': 'converse',
  'POST /v1/chat/completions': 'converse',
};

/** Access of a matched route: its entry in ROUTE_ACCESS, else reads for GET and operations for the rest. */
export function accessOf(method: string, routePattern: string): Access {
  // CORS preflights (src/protocols/cors.ts): a browser sends them without credentials.
  if (method === 'OPTIONS') return 'public';
  const m = method === 'HEAD' ? 'GET' : method;
  return ROUTE_ACCESS[`${m} ${routePattern}`] ?? (m === 'GET' ? 'read' : 'operate');
}

/** Which roles may call a matched route. */
export function rolesFor(method: string, routePattern: string): Role[] {
  const access = accessOf(method, routePattern);
  return access === 'public' ? ['reader', 'operator', 'approver', 'admin'] : ROLES[access];
}

declare module 'fastify' {
  interface FastifyRequest {
    apiKeyName?: string;
    /** The role of the key a protected route was called with; unset when auth is off. */
    apiKeyRole?: Role;
    /** The tenant of that key (`auth.api_keys[].tenant`); unset for a global key or without auth. */
    apiKeyTenant?: string;
  }
}

/**
 * Whether the request's key may do what `access` names, for a route that carries several kinds of
 * work in its body (POST /a2a, POST /mcp, the `converse` routes). Without auth everything is allowed, as on every route.
 */
export function mayAccess(request: FastifyRequest, access: Exclude<Access, 'public'>): boolean {
  return request.apiKeyRole === undefined || ROLES[access].includes(request.apiKeyRole);
}

/** Throws the 403 a route would, unless the request's key may do what `access` names. */
export function requireAccess(request: FastifyRequest, access: Exclude<Access, 'public'>, what: string): void {
  if (!mayAccess(request, access)) throw domainError('AGT_ERR_FORBIDDEN', [request.apiKeyRole ?? 'anonymous', request.method, what]);
}

/**
 * Bearer API keys, stored as SHA-256 hashes so the config never holds a usable secret.
 * Off when `auth.api_keys` is empty.
 *
 * Checked in onRequest, after routing, against the route the router MATCHED. Each route's access
 * is decided once, when it is registered (onRoute): a public route gets no check at all, a
 * protected one a hook that knows its roles, so no request looks its route up again. A request
 * that matched no route still needs a valid key (any role) before it learns that the route is
 * missing (a global hook, which does nothing for matched routes).
 */
export function installAuth(app: FastifyInstance, deps: AppDeps): void {
  const keys = deps.config.auth?.api_keys ?? [];
  if (keys.length === 0) return;
  const table = keys.map((k) => ({ name: k.name, role: k.role as Role, tenant: k.tenant, hash: Buffer.from(k.key_sha256.toLowerCase(), 'hex') }));

  /** The key the request presents; throws 401 when there is none or it is not valid. */
  const authenticate = (request: FastifyRequest): { name: string; role: Role; tenant?: string } => {
    const header = request.headers.authorization;
    const match = typeof header === 'string' ? /^Bearer\s+(.+)$/i.exec(header.trim()) : null;
    if (!match) throw domainError('AGT_ERR_UNAUTHORIZED', [], { headers: { 'www-authenticate': 'Bearer' } });
    const digest = createHash('sha256').update(match[1]).digest();
    const key = table.find((k) => k.hash.length === digest.length && timingSafeEqual(k.hash, digest));
    if (!key) throw domainError('AGT_ERR_API_KEY_INVALID', [], { headers: { 'www-authenticate': 'Bearer' } });
    return key;
  };

  const seen = new Set<string>();
  app.addHook('onRoute', (route) => {
    const pattern = route.url;
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const m of methods) seen.add(`${m} ${pattern}`);
    const accessByMethod = new Map(methods.map((m) => [m, accessOf(m, pattern)] as const));
    if ([...accessByMethod.values()].every((a) => a === 'public')) return;
    const check: onRequestHookHandler = (request, _reply, done) => {
      const access = accessByMethod.get(request.method) ?? accessOf(request.method, pattern);
      if (access === 'public') return done();
      try {
        const key = authenticate(request);
        if (!ROLES[access].includes(key.role)) throw domainError('AGT_ERR_FORBIDDEN', [key.role, request.method, pattern]);
        request.apiKeyName = key.name;
        request.apiKeyRole = key.role;
        if (key.tenant !== undefined) request.apiKeyTenant = key.tenant;
      } catch (err) {
        return done(err as Error);
      }
      done();
    };
    // First, before any hook of the route's own.
    route.onRequest = route.onRequest ? [check, ...[route.onRequest].flat()] : check;
  });

  // Fail closed: a route registered before this hook would have no check at all.
  app.addHook('onReady', async () => {
    const unchecked = app.routeList.filter((r) => !seen.has(`${r.method} ${r.url}`));
    if (unchecked.length > 0)
      // eslint-disable-next-line no-restricted-syntax -- a wiring bug: the server refuses to start (onReady), no request is answered yet
      throw new Error(`routes registered before installAuth (no auth check): ${unchecked.map((r) => `${r.method} ${r.url}`).join(', ')}`);
  });

  app.addHook('onRequest', (request, _reply, done) => {
    if (!request.is404) return done();
    try {
      request.apiKeyName = authenticate(request).name;
    } catch (err) {
      return done(err as Error);
    }
    done();
  });
}

/** The key deciding an approval, for the rule's `approvers` (null without auth: anyone decides; docs/policies.md). */
export function deciderOf(request: FastifyRequest): { name: string; role: string; global: boolean } | null {
  if (request.apiKeyRole === undefined) return null;
  return { name: request.apiKeyName ?? '', role: request.apiKeyRole, global: request.apiKeyTenant === undefined };
}
