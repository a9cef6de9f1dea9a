// Which Host headers the service answers (`server.allowed_hosts`). A page a browser loaded from
// another site can make that browser call agentd once its own name resolves to agentd's address
// (DNS rebinding): the browser then sends the page's name as Host. Answering only the names the
// service is reached by closes that door where auth is off. /health and /ready answer any Host
// (probes of load balancers and orchestrators send whatever address they use).
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.js';
import { domainError } from '../errors.js';
import { parseHost } from '../host-names.js';

/** A listed host: its name (lower case, IPv6 in brackets) and its port, or any port. */
interface HostRule {
  name: string;
  /** null: any port; 'bound': the port the server listens on. */
  port: number | 'bound' | null;
}

/** An address or name that only this machine can reach. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase();
  return h === 'localhost' || h === '::1' || h === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * The hosts a server answers: null for any. Listed hosts when `server.allowed_hosts` is set ("*"
 * means any); else, bound to loopback with auth off, the loopback names on the bound port; else
 * any (with auth on the keys guard the API; bound elsewhere without auth, start-up warns).
 */
function rulesOf(config: Config): HostRule[] | null {
  const listed = config.server.allowed_hosts;
  if (listed !== undefined) {
    if (listed.includes('*')) return null;
    return listed.map((h) => parseHost(h)!);
  }
  if (config.auth.api_keys.length === 0 && isLoopback(config.server.host)) {
    return ['localhost', '127.0.0.1', '[::1]'].map((name) => ({ name, port: 'bound' }));
  }
  return null;
}

/** The start-up warning for a service anyone's browser may reach with a rebound name, or null. */
export function openHostWarning(config: Config): string | null {
  if (config.server.allowed_hosts !== undefined || config.auth.api_keys.length > 0 || isLoopback(config.server.host)) return null;
  return (
    `agentd: listening on ${config.server.host} with auth off and no server.allowed_hosts: any Host header is answered, ` +
    'so a web page can reach the API through DNS rebinding; set server.allowed_hosts to the names clients use (or ["*"]) or turn auth on'
  );
}

/**
 * Refuses a request whose Host is not allowed (400 AGT_ERR_HOST_NOT_ALLOWED), before routing
 * matters and before auth: a global onRequest hook, registered before installAuth's, so its
 * hooks run first. /health and /ready are exempt by their plain path only: a request exempted
 * this way can reach nothing else.
 */
export function installHostCheck(app: FastifyInstance, config: Config): void {
  const rules = rulesOf(config);
  if (rules === null) return;
  let boundPort: number | null = null;
  const portNow = (): number | null => {
    if (boundPort !== null) return boundPort;
    const address = app.server.address();
    // Not listening (inject() in tests): the names alone are checked.
    if (address && typeof address === 'object') boundPort = address.port;
    return boundPort;
  };
  const allowed = (header: string | undefined): boolean => {
    if (header === undefined) return false;
    const host = parseHost(header);
    if (!host) return false;
    return rules.some((r) => {
      if (r.name !== host.name) return false;
      if (r.port === null) return true;
      const want = r.port === 'bound' ? portNow() : r.port;
      // No port in the header means the scheme's default (80: the service speaks plain HTTP).
      return want === null || (host.port ?? 80) === want;
    });
  };
  app.addHook('onRequest', (request, _reply, done) => {
    const url = request.url;
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (path === '/health' || path === '/ready') return done();
    if (!allowed(request.headers.host)) return done(domainError('AGT_ERR_HOST_NOT_ALLOWED', []));
    done();
  });
}
