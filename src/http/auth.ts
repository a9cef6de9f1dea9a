import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AppError } from '../errors.js';
import type { AppDeps } from './deps.js';

export type Role = 'reader' | 'operator' | 'approver' | 'admin';

const PUBLIC_PREFIXES = ['/health', '/ready', '/openapi.json', '/docs'];

/** Decision routes: only approvers (and admins) may decide for a person. */
const isDecisionRoute = (method: string, url: string) =>
  method === 'POST' && (/^\/runs\/[^/]+\/approvals\/[^/]+/.test(url) || /^\/runs\/[^/]+\/budget\/?$/.test(url));

/** Which roles may make this request (decisions.md §9). */
export function rolesFor(method: string, url: string): Role[] {
  if (method === 'GET' || method === 'HEAD') return ['reader', 'operator', 'approver', 'admin'];
  if (isDecisionRoute(method, url)) return ['approver', 'admin'];
  return ['operator', 'admin'];
}

declare module 'fastify' {
  interface FastifyRequest {
    apiKeyName?: string;
  }
}

/**
 * Bearer API keys, stored as SHA-256 hashes so the config never holds a usable secret.
 * Off when `auth.api_keys` is empty.
 */
export function installAuth(app: FastifyInstance, deps: AppDeps): void {
  const keys = deps.config.auth?.api_keys ?? [];
  if (keys.length === 0) return;
  const table = keys.map((k) => ({ name: k.name, role: k.role as Role, hash: Buffer.from(k.key_sha256.toLowerCase(), 'hex') }));

  app.addHook('onRequest', async (request: FastifyRequest) => {
    const path = request.url.split('?')[0];
    if (PUBLIC_PREFIXES.some((p) => path === p || path.startsWith(`${p}/`))) return;
    const header = request.headers.authorization;
    const match = typeof header === 'string' ? /^Bearer\s+(.+)$/i.exec(header.trim()) : null;
    if (!match) throw new AppError('Unauthorized', 'send Authorization: Bearer <api key>', null, { 'www-authenticate': 'Bearer' });
    const digest = createHash('sha256').update(match[1]).digest();
    const key = table.find((k) => k.hash.length === digest.length && timingSafeEqual(k.hash, digest));
    if (!key) throw new AppError('Unauthorized', 'the API key is not valid', null, { 'www-authenticate': 'Bearer' });
    if (!rolesFor(request.method, path).includes(key.role)) {
      throw new AppError('Forbidden', `the '${key.role}' role may not ${request.method} ${path}`);
    }
    request.apiKeyName = key.name;
  });
}
