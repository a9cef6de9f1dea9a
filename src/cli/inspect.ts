// `agentd serve --inspect [URL]`: the actor system's inspection events (every actor, event and
// snapshot of the run, session, supervisor and background machines) sent to a WebSocket endpoint
// with @statelyai/inspect's WebSocket inspector, e.g. the relay of `@statelyai/inspect/server`
// that feeds the Stately inspector in a browser (docs/machines.md).
//
// What the library does not do, and this adds: say where the events go and whether the endpoint
// is reached (the library retries every 5 s in silence), and redact. A snapshot's context and an
// event carry tool arguments and model text, so they go through the process's Redactor like any
// other telemetry leaving the process. Bounded: the library keeps at most `maxDeferredEvents`
// events while the endpoint is unreachable (the oldest are dropped).
import type { createActor } from 'xstate';
import { redact, type Redactor } from '../telemetry/redact.js';

type InspectFn = NonNullable<NonNullable<Parameters<typeof createActor>[1]>['inspect']>;
type Log = (level: 'info' | 'warn', msg: string) => void;

/** Events kept while the endpoint cannot be reached (the library's default is 200). */
export const MAX_DEFERRED_INSPECTION_EVENTS = 500;
/** How often a reconnection by the library is looked for, to log that the endpoint is back. */
const WATCH_MS = 1000;

interface SocketLike {
  addEventListener(type: 'open' | 'error' | 'close', fn: (ev: { message?: string; error?: { message?: string; code?: string } }) => void): void;
}

export interface InspectorHandle {
  inspect: InspectFn;
  stop(): void;
}

export async function startInspector(url: string, redactor: Redactor, log: Log): Promise<InspectorHandle> {
  const { createWebSocketInspector } = await import('@statelyai/inspect');
  const inspector = createWebSocketInspector({
    url,
    autoStart: false,
    maxDeferredEvents: MAX_DEFERRED_INSPECTION_EVENTS,
    sanitizeContext: (context) => redact(context, redactor) as typeof context,
    sanitizeEvent: (event) => redact(event, redactor) as typeof event,
  });
  log('info', `agentd: sending XState inspection events to ${url}`);
  // The adapter opens a new socket after each failure; its current one is read to report the
  // connection's state changes (once per change, not once per retry).
  const adapter = inspector.adapter as unknown as { ws?: SocketLike; start(): void };
  let stopped = false;
  let watched: SocketLike | undefined;
  let state: 'connecting' | 'open' | 'failing' = 'connecting';
  const watch = () => {
    const ws = adapter.ws;
    if (!ws || ws === watched) return;
    watched = ws;
    ws.addEventListener('open', () => {
      if (state !== 'open') log('info', `agentd: connected to the XState inspector at ${url}`);
      state = 'open';
    });
    ws.addEventListener('error', (ev) => {
      if (state === 'failing') return;
      const why = ev.error?.code ?? ev.error?.message ?? ev.message ?? 'connection failed';
      log(
        'warn',
        `agentd: cannot reach the XState inspector at ${url} (${why}); the service runs on, inspection events are kept (the last ${MAX_DEFERRED_INSPECTION_EVENTS}) and the connection is retried every 5 s`,
      );
      state = 'failing';
    });
    ws.addEventListener('close', () => {
      if (state !== 'open' || stopped) return;
      log('warn', `agentd: the XState inspector at ${url} closed the connection; retrying every 5 s`);
      state = 'failing';
      // The library retries after an error but not after a clean close (the relay restarted).
      const retry = setTimeout(() => stopped || adapter.start(), 5000);
      retry.unref();
    });
  };
  inspector.start();
  watch();
  const timer = setInterval(watch, WATCH_MS);
  timer.unref();
  return {
    inspect: inspector.inspect as InspectFn,
    stop() {
      stopped = true;
      clearInterval(timer);
      inspector.stop();
    },
  };
}
