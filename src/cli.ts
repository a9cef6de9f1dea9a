#!/usr/bin/env node
// The `agentd` command. Thin: parses the sub-command and delegates.
import { ConfigError, configJsonSchema, loadConfig } from './config.js';
import { handleSignals, startServer } from './main.js';
import { describeMachines } from './runtime/machines-info.js';
import { readVersion } from './version.js';
import { configCheckJson } from './telemetry/secrets.js';

const HELP = `agentd: serve one configured LLM agent over HTTP, safely.

Usage:
  agentd serve [--config FILE] [--host H] [--port N] [--data-dir DIR] [--inspect]
      Start the service. With no config it runs on the embedded store with the built-in demo
      model (offline). Env: AGENTD_CONFIG, AGENTD_HOST, AGENTD_PORT, AGENTD_DATA_DIR,
      AGENTD_MODEL_BASE_URL, AGENTD_MODEL, AGENTD_MODEL_API_KEY (else OPENAI_API_KEY).
      --inspect connects the actor system to the Stately inspector (WebSocket).
  agentd config schema      Print the JSON Schema of the config file.
  agentd config check [--config FILE]   Validate a config file and print the resolved config.
  agentd machines           Print every state machine as a Mermaid diagram.
  agentd version            Print the version.
  agentd --help             This text.

Docs: README.md and docs/ (configuration.md, http-api.md, operations.md).`;

async function main(argv: string[]): Promise<number> {
  const [cmd, sub] = argv;
  if (!cmd || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    process.stdout.write(`${HELP}\n`);
    return cmd ? 0 : 1;
  }
  if (cmd === 'version' || cmd === '--version') {
    process.stdout.write(`${readVersion()}\n`);
    return 0;
  }
  if (cmd === 'config' && sub === 'schema') {
    process.stdout.write(`${JSON.stringify(configJsonSchema(), null, 2)}\n`);
    return 0;
  }
  if (cmd === 'config' && sub === 'check') {
    const config = loadConfig({ argv: argv.slice(2) });
    // Header values, credential-named MCP env values, URL passwords: masked (issue 10, finding 9).
    process.stdout.write(`${configCheckJson(config)}\n`);
    return 0;
  }
  if (cmd === 'machines') {
    for (const m of describeMachines()) process.stdout.write(`## ${m.id} (version ${m.version})\n\n\`\`\`mermaid\n${m.mermaid}\n\`\`\`\n\n`);
    return 0;
  }
  if (cmd === 'serve') {
    const args = argv.slice(1);
    const inspectFlag = args.includes('--inspect');
    const config = loadConfig({ argv: args.filter((a) => a !== '--inspect') });
    let inspect;
    if (inspectFlag) {
      const { createWebSocketInspector } = await import('@statelyai/inspect');
      inspect = createWebSocketInspector().inspect;
    }
    // Every line, this one included, goes through the process's logger (src/telemetry/logger.ts):
    // JSON on stderr, or the pretty format on a terminal; redacted like telemetry.
    const server = await startServer(config, { inspect });
    handleSignals(server);
    server.logger.info(`agentd ${readVersion()} listening on ${server.url} (agent '${config.agent.name}', model ${server.runtime.model.provider}/${server.runtime.model.model}, store ${config.store.kind} at ${config.store.kind === 'level' ? config.store.path : 'postgres'})`);
    return -1; // keep running
  }
  process.stderr.write(`agentd: unknown command '${argv.join(' ')}'\n\n${HELP}\n`);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err) => {
    if (err instanceof ConfigError) process.stderr.write(`agentd: ${err.message}\n`);
    else if ((err as { code?: string })?.code === 'locked' || /LOCK/.test(String((err as Error)?.message))) process.stderr.write(`agentd: the data dir is in use by another agentd process (${String((err as Error).message)})\n`);
    else process.stderr.write(`agentd: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
