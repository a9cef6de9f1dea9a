// The commands that run on this machine without a service: `serve`, `config check|schema`,
// `machines`. Flags were parsed strictly by args.ts; the config loader still resolves them
// (with their env twins, decisions.md §10), so both paths agree on precedence.
import { ConfigError, configJsonSchema, loadConfig } from '../config.js';
import { handleSignals, startServer } from '../main.js';
import { describeMachines } from '../runtime/machines-info.js';
import { readVersion } from '../version.js';
import { configCheckJson, redactorForConfig } from '../telemetry/secrets.js';
import { createLogger, loggerSettings } from '../telemetry/logger.js';
import { checkInspectUrl, EXIT, type Parsed } from './args.js';
import { describeStoreUrl } from '../store/pg-url.js';

/** The flags the config loader reads, back in its argv form. */
function configArgv(values: Parsed['values']): string[] {
  const out: string[] = [];
  for (const name of ['config', 'host', 'port', 'data-dir'] as const) {
    const v = values[name];
    if (typeof v === 'string') {
      if (v === '') throw new ConfigError([`--${name}: expected a value`]);
      out.push(`--${name}=${v}`);
    }
  }
  return out;
}

export async function serve(p: Parsed): Promise<number> {
  const inspectUrl = typeof p.values.inspect === 'string' ? checkInspectUrl(p.values.inspect) : null;
  const config = loadConfig({ argv: configArgv(p.values) });
  // Every line, this one included, goes through the process's logger (src/telemetry/logger.ts):
  // JSON on stderr, or the pretty format on a terminal; redacted like telemetry.
  const redactor = redactorForConfig(config);
  const logger = createLogger({ ...loggerSettings(config.log), redactor });
  let inspect;
  if (inspectUrl) {
    const { startInspector } = await import('./inspect.js');
    inspect = (await startInspector(inspectUrl, redactor, (level, msg) => logger[level](msg))).inspect;
  }
  const server = await startServer(config, { inspect, logger });
  handleSignals(server);
  server.logger.info(
    `agentd ${readVersion()} listening on ${server.url} (agent '${config.agent.name}', model ${server.runtime.model.provider}/${server.runtime.model.model}, store ${config.store.kind} at ${config.store.kind === 'level' ? config.store.path : describeStoreUrl(config.store.url ?? '')})`,
  );
  return -1; // keep running
}

export async function configCheck(p: Parsed): Promise<number> {
  const config = loadConfig({ argv: configArgv(p.values) });
  // Header values, credential-named MCP env values, URL passwords: masked (issue 10, finding 9).
  // Webhook receivers often carry their token in the path (hooks.slack.com/services/T/B/<token>):
  // an endpoint's URL is shown by its origin only.
  const shown = JSON.parse(configCheckJson(config)) as { webhooks: { endpoints: Array<{ url: string }> } };
  for (const e of shown.webhooks.endpoints) e.url = originOnly(e.url);
  process.stdout.write(`${JSON.stringify(shown, null, 2)}\n`);
  return EXIT.ok;
}

/** `https://host:port/[REDACTED]` for a URL with a path or query; the URL itself when it has neither. */
function originOnly(url: string): string {
  try {
    const u = new URL(url);
    return u.pathname === '/' && u.search === '' ? `${u.origin}/` : `${u.origin}/[REDACTED]`;
  } catch {
    return '[REDACTED]';
  }
}

export async function configSchema(): Promise<number> {
  process.stdout.write(`${JSON.stringify(configJsonSchema(), null, 2)}\n`);
  return EXIT.ok;
}

export async function machines(): Promise<number> {
  for (const m of describeMachines()) process.stdout.write(`## ${m.id} (version ${m.version})\n\n\`\`\`mermaid\n${m.mermaid}\n\`\`\`\n\n`);
  return EXIT.ok;
}
