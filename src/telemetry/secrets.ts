// The secret values a configuration holds: built once at start-up into the
// Redactor every event, run record, OTLP span and log line goes through, so a provider that echoes
// the model key in a 401 body (or a tool that prints an MCP token) never gets it stored or exported.
import type { Config } from '../config.js';
import { MIN_SECRET_CHARS, Redactor, redact } from './redact.js';

// An MCP stdio server's env also carries plain settings (NODE_ENV=production, LOG_LEVEL=debug)
// that must not be scrubbed from every text; a variable counts as a credential by its name.
const CREDENTIAL_ENV_NAME = /key|token|secret|pass|pwd|auth|credential|cookie|session|signature|dsn|private/i;

/** The password in a URL's user info (`postgres://user:password@host`), or null. */
function urlPassword(value: string): string | null {
  if (!value.includes('@') || !value.includes('://')) return null;
  try {
    const password = new URL(value).password;
    return password ? decodeURIComponent(password) : null;
  } catch {
    return null;
  }
}

/** A header value, and its credential without the scheme (`Bearer abc` also gives `abc`). */
function headerValues(value: string): string[] {
  const out = [value];
  const m = /^\s*[A-Za-z][\w-]*\s+(\S.*)$/.exec(value);
  if (m) out.push(m[1].trim());
  return out;
}

/**
 * Every credential the config holds: the model API key, the OTLP headers' values, MCP HTTP
 * servers' header values, MCP stdio servers' env values whose names look like credentials (and
 * passwords of URLs in any env value), and the passwords of every configured URL (store, model,
 * OTLP endpoint, MCP servers), and what registered agents may resolve: the values of
 * `agents.secret_env` and every `${NAME}` of `agents.mcp_servers`. Values shorter than
 * MIN_SECRET_CHARS are left out.
 */
export function configuredSecrets(config: Config): string[] {
  const found: string[] = [];
  const add = (v: string | null | undefined): void => {
    if (typeof v === 'string' && v.length >= MIN_SECRET_CHARS) found.push(v);
  };
  const addUrl = (u: string | null | undefined): void => {
    if (typeof u === 'string') add(urlPassword(u));
  };

  add(config.agent.model.api_key);
  for (const e of config.webhooks?.endpoints ?? []) {
    add(e.signing_secret);
    addUrl(e.url);
  }
  add(config.webhooks?.request_signing_secret);
  addUrl(config.agent.model.base_url);
  addUrl(config.store.url);
  const otlp = config.telemetry.otlp;
  addUrl(otlp.endpoint);
  addUrl(otlp.traces_endpoint);
  for (const v of Object.values(otlp.headers ?? {})) headerValues(v).forEach(add);
  // What registered agents may use (read at start-up, src/config.ts): every value an agent build
  // can resolve is here, so a provider or MCP server echoing it never gets it answered or exported.
  const agentsResolved = config.agents.resolved;
  for (const v of Object.values(agentsResolved.secrets)) add(v);
  for (const v of agentsResolved.interpolated) add(v);
  const servers = [...config.agent.tools.mcp, ...Object.values(agentsResolved.mcp)];
  for (const server of servers) {
    if ('url' in server) {
      addUrl(server.url);
      for (const v of Object.values(server.headers ?? {})) headerValues(v).forEach(add);
    }
    if ('env' in server) {
      for (const [name, v] of Object.entries(server.env ?? {})) {
        if (CREDENTIAL_ENV_NAME.test(name)) add(v);
        addUrl(v);
      }
    }
  }
  return [...new Set(found)];
}

const byConfig = new WeakMap<Config, Redactor>();

/** The Redactor of a process: value patterns plus the config's secret values (built once per config). */
export function redactorForConfig(config: Config): Redactor {
  let redactor = byConfig.get(config);
  if (!redactor) byConfig.set(config, (redactor = new Redactor(configuredSecrets(config))));
  return redactor;
}

/**
 * The resolved config as `agentd config check` prints it: every configured secret value and any
 * credential-shaped text masked. Only string values are scanned (field names are kept: the check
 * must still show `api_key_env` or the names and roles of `auth.api_keys`). The model key is a
 * non-enumerable property of the config and is never printed at all.
 */
export function configCheckJson(config: Config): string {
  const redactor = redactorForConfig(config);
  return JSON.stringify(config, (_key, value: unknown) => (typeof value === 'string' ? redactor.text(value) : value), 2);
}

/** One JSON log line's fields as they may be written: secret-named fields and secrets inside strings redacted. */
export function redactLogFields(fields: Record<string, unknown>, config: Config): Record<string, unknown> {
  return redact(fields, redactorForConfig(config)) as Record<string, unknown>;
}
