// The servers the fuzzer talks to: real agentd servers (LevelDB in a temp dir, the built-in demo
// model, so runs cost next to nothing), one without auth and one with an API key per role, each
// with things to find: a completed run, runs waiting for an approval and for a budget, a manual
// task with a background run, a registered agent. Every 5xx the server logs is collected too.
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { configFromObject } from '../../src/config.js';
import { startServer, type Server } from '../../src/main.js';
import type { ServerErrorEntry } from '../../src/http/error-handler.js';
import { tempDir } from '../helpers/server.js';
import { Pools, type FuzzTarget, type Keys, type OpenApiDoc } from './openapi-fuzz.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');

export const FUZZ_KEYS: Keys = { admin: 'fuzz-admin-key', reader: 'fuzz-reader-key', operator: 'fuzz-operator-key', approver: 'fuzz-approver-key' };

export interface RunningTarget extends FuzzTarget {
  server: Server;
  url: string;
  serverErrors: ServerErrorEntry[];
  stop(): Promise<void>;
}

function configFor(name: 'open' | 'auth'): Record<string, unknown> {
  return {
    server: {
      port: 0,
      // Below the fuzzer's 10 s hang timeout: a synchronous run that waits too long shows as a 504
      // (a failure with a route) rather than as an anonymous hang.
      request_timeout_seconds: 8,
      // A client that closes a stream whose request body the server never read (a GET with a
      // body) is only noticed when the body timeout ends that request: 5 s instead of 30, so the
      // check that every stream subscription was released can wait for it.
      body_timeout_seconds: 5,
      // Every request passes the CORS hooks (src/protocols/cors.ts), and every route has a preflight.
      cors: { origins: ['https://fuzz.example.com'] },
    },
    // Something to decide: workspace_write asks a person; a run may call one tool, then waits for a grant.
    governance: { rules: [{ tools: ['workspace_write'], effect: 'ask', reason: 'fuzz' }] },
    budgets: { run: [{ meter: 'tool_calls', limit: 1, on_exhausted: 'pause' }] },
    runs: { orphan_sweep: { interval_seconds: 3600 } },
    ...(name === 'auth'
      ? {
          auth: {
            bind_approver: true,
            api_keys: (Object.keys(FUZZ_KEYS) as Array<keyof Keys>).map((role) => ({ name: role, role, key_sha256: sha(FUZZ_KEYS[role]) })),
          },
        }
      : {}),
  };
}

export async function startTarget(name: 'open' | 'auth'): Promise<RunningTarget> {
  const dataDir = tempDir('agentd-fuzz-');
  const serverErrors: ServerErrorEntry[] = [];
  const config = configFromObject(configFor(name), { dataDir, env: {} });
  const server = await startServer(config, { logServerError: (e) => serverErrors.push(e) });
  const port = Number(new URL(server.url).port);
  const keys = name === 'auth' ? FUZZ_KEYS : null;
  const t: RunningTarget = {
    name,
    port,
    keys,
    pools: new Pools(),
    server,
    url: server.url,
    serverErrors,
    stop: async () => {
      await server.close(0);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  await seed(t);
  return t;
}

async function call(t: RunningTarget, method: string, path: string, body?: unknown): Promise<unknown> {
  const headers: Record<string, string> = t.keys ? { authorization: `Bearer ${t.keys.admin}` } : {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${t.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = (await res.json().catch(() => null)) as unknown;
  if (res.ok) t.pools.harvest(json);
  return json;
}

/** Things to find, so the fuzzer's pool references name real runs, approvals, tasks and traces. */
async function seed(t: RunningTarget): Promise<void> {
  for (const s of ['fz-s1', 'fz-s2', 'fz-s3', 'fz-s4']) t.pools.add('session_id', s);
  await call(t, 'POST', '/run/sync', { query: 'hello', session_id: 'fz-s1' });
  await call(t, 'POST', '/run/sync', { query: 'use workspace_write', session_id: 'fz-s2' }); // awaiting_approval
  await call(t, 'POST', '/run/sync', { query: 'use workspace_write please', session_id: 'fz-s3' });
  await call(t, 'POST', '/run/sync', { query: 'use clock and workspace_list', session_id: 'fz-s4' }); // awaiting_budget
  await call(t, 'POST', '/background/agents', { agent_id: 'fz-agent', spec: { agent_id: 'fz-agent', name: 'fuzz agent' } });
  await call(t, 'POST', '/background/tasks', { task_id: 'fz-task', query: 'hello', schedule: { type: 'manual' } });
  await call(t, 'POST', '/background/tasks', {
    task_id: 'fz-task-2',
    query: 'use workspace_write',
    schedule: { type: 'once', run_at: '2099-01-01T00:00:00Z' },
  });
  await call(t, 'POST', '/background/tasks/fz-task/run', { wait: true });
  await call(t, 'GET', '/runs?limit=50');
  await call(t, 'GET', '/background/runs');
  await call(t, 'GET', '/telemetry/traces');
  await call(t, 'GET', '/telemetry/events?limit=20');
}

export async function fetchDoc(t: RunningTarget): Promise<OpenApiDoc> {
  return (await (await fetch(`${t.url}/openapi.json`)).json()) as OpenApiDoc;
}
