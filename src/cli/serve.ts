// The commands that run on this machine without a service: `serve`, `config check|schema`,
// `machines`. Flags were parsed strictly by args.ts; the config loader still resolves them
// (with their env twins, docs/contract.md §10), so both paths agree on precedence.
import { ConfigError, configJsonSchema, loadConfig } from '../config.js';
import { handleSignals, startServer } from '../main.js';
import { describeMachines } from '../runtime/machines-info.js';
import { readVersion } from '../version.js';
import { configCheckJson, redactorForConfig } from '../telemetry/secrets.js';
import { createLogger, loggerSettings } from '../telemetry/logger.js';
import { checkInspectUrl, EXIT, UsageError, type Parsed } from './args.js';
import { DemoModel } from '../agent/model/demo.js';
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

/**
 * The demo model's pause between streamed words when serving (`--demo-delay-ms`): a first-time
 * user sees the answer and its events arrive live, and a trace whose model calls take time. Only
 * `serve` sets it; tests start the server in-process with no delay.
 */
const DEFAULT_DEMO_DELAY_MS = 15; // the default named in the --demo-delay-ms help (commands.ts)

function demoDelay(value: unknown): number {
  if (value === undefined) return DEFAULT_DEMO_DELAY_MS;
  const n = Number(value);
  if (typeof value !== 'string' || !/^\d{1,4}$/.test(value) || n > 5000) {
    throw new UsageError(`--demo-delay-ms: expected milliseconds from 0 to 5000, got '${String(value)}'`, 'agentd serve');
  }
  return n;
}

export async function serve(p: Parsed): Promise<number> {
  const inspectUrl = typeof p.values.inspect === 'string' ? checkInspectUrl(p.values.inspect) : null;
  const delayMs = demoDelay(p.values['demo-delay-ms']);
  const config = loadConfig({ argv: configArgv(p.values) });
  const m = config.agent.model;
  const model =
    m.provider === 'demo'
      ? new DemoModel({
          model: m.model ?? 'demo',
          chunkDelayMs: delayMs,
          ...(m.max_output_tokens !== undefined ? { max_output_tokens: m.max_output_tokens } : {}),
        })
      : undefined;
  // Every line, this one included, goes through the process's logger (src/telemetry/logger.ts):
  // JSON on stderr, or the pretty format on a terminal; redacted like telemetry.
  const redactor = redactorForConfig(config);
  const logger = createLogger({ ...loggerSettings(config.log), redactor });
  let inspect;
  if (inspectUrl) {
    const { startInspector } = await import('./inspect.js');
    inspect = (await startInspector(inspectUrl, redactor, (level, msg) => logger[level](msg))).inspect;
  }
  const server = await startServer(config, { inspect, logger, model });
  handleSignals(server);
  server.logger.info(
    `agentd ${readVersion()} listening on ${server.url} (agent '${config.agent.name}', model ${server.runtime.model.provider}/${server.runtime.model.model}, store ${config.store.kind} at ${config.store.kind === 'level' ? config.store.path : describeStoreUrl(config.store.url ?? '')}); dashboard ${server.url}/ui`,
  );
  return -1; // keep running
}

export async function configCheck(p: Parsed): Promise<number> {
  const config = loadConfig({ argv: configArgv(p.values) });
  // Header values, credential-named MCP env values, URL passwords: masked.
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
