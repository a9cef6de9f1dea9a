// Composition root: config -> store -> runtime -> app -> listen. SIGTERM drains.
import { mkdirSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { openHostWarning } from './http/host-check.js';
import type { ServerErrorLog } from './http/error-handler.js';
import type { Config } from './config.js';
import { openStore } from './store/open.js';
import type { Store } from './store/store.js';
import { Runtime, type RuntimeOptions } from './composition-root.js';
import { readVersion } from './version.js';
import { createLogger, loggerSettings, type Logger } from './telemetry/logger.js';
import { bindSwallowedErrorLog, reportSwallowed } from './telemetry/swallowed.js';
import { redactorForConfig } from './telemetry/secrets.js';

export interface Server {
  app: FastifyInstance;
  runtime: Runtime;
  store: Store;
  url: string;
  /** The process's one logger: HTTP, runtime and CLI lines all go through it. */
  logger: Logger;
  close(graceMs?: number): Promise<void>;
}

/**
 * `logger`: default, one built from AGENTD_LOG_LEVEL / AGENTD_LOG_FORMAT writing to stderr.
 * `logRequests`: a line per request (default AGENTD_LOG_REQUESTS=1). The runtime logs through the
 * same logger (children of it carry a run's id).
 */
export async function startServer(
  config: Config,
  opts: RuntimeOptions & { logger?: Logger; logRequests?: boolean; listen?: boolean; logServerError?: ServerErrorLog } = {},
): Promise<Server> {
  const logger = opts.logger ?? createLogger({ ...loggerSettings(config.log), redactor: redactorForConfig(config) });
  bindSwallowedErrorLog(logger);
  mkdirSync(config.data_dir, { recursive: true });
  const store =
    config.store.kind === 'postgres'
      ? await openStore({
          kind: 'postgres',
          url: config.store.url,
          poolSize: config.store.pool_size,
          statementTimeoutMs: config.store.statement_timeout_ms,
          log: (level, msg) => logger[level](msg),
          onSwallowed: reportSwallowed,
        })
      : await openStore({ kind: 'level', path: config.store.path, sync: config.store.sync, onSwallowed: reportSwallowed });
  const runtime = await Runtime.create(config, store, { ...opts, logger });
  const app = await buildApp({
    config,
    store,
    runtime,
    version: readVersion(),
    logger,
    logRequests: opts.logRequests ?? config.log.requests,
    authEnabled: config.auth.api_keys.length > 0,
    logServerError: opts.logServerError,
  });
  let url = '';
  if (opts.listen !== false) {
    url = await app.listen({ host: config.server.host, port: config.server.port });
    const open = openHostWarning(config);
    if (open) logger.warn(open);
  }
  await runtime.start();
  let closed = false;
  return {
    app,
    runtime,
    store,
    url,
    logger,
    async close(graceMs = 30_000) {
      if (closed) return;
      closed = true;
      // Runs first: each stops at its next step boundary and is saved `interrupted`, and its open
      // stream still gets a `complete` frame saying so. Closing HTTP first would close those
      // streams, and a closed stream means "cancel" to a live run.
      runtime.runs.lifecycle.beginShutdown();
      await runtime.close(graceMs);
      await app.close();
      await store.close();
    },
  };
}

/** Installs SIGTERM/SIGINT handling: stop accepting, save live runs as interrupted, exit 0. */
export function handleSignals(server: Server, log: (msg: string) => void = (m) => server.logger.info(m)): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log(`agentd: ${signal} received, draining live runs`);
    server.close().then(
      () => process.exit(0),
      (err) => {
        log(`agentd: shutdown failed: ${String(err)}`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}
