// Shared helpers of the background HTTP tests: a small JSON client, a scripted model driven by
// directives written in the task query, and waiting for a run to reach a status.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { ChatCompletionRequestBody, ScriptedOpenAI, ScriptedReply } from '../fixtures/scripted-openai.js';
import { eventually } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';

export const TOOLS = join(import.meta.dirname, 'fixtures/tools.mjs');

/**
 * A server in a child process on `dataDir` (fixtures/child-server.ts), so a test can SIGKILL it
 * mid-run; `env` is added to this process's. Answers once it printed its URL; `output()` is its
 * stdout so far (the tools' fixture lines). Fails with its stderr if it exits before.
 */
export async function startChildServer(
  dataDir: string,
  config: object,
  env: NodeJS.ProcessEnv,
): Promise<{ child: ChildProcess; url: string; output: () => string }> {
  const file = join(import.meta.dirname, 'fixtures/child-server.ts');
  const child = spawn(process.execPath, ['--import', 'tsx', file, dataDir, JSON.stringify(config)], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let exited: number | null | undefined;
  child.stdout!.on('data', (d) => (out += String(d)));
  child.stderr!.on('data', (d) => (err += String(d)));
  child.once('exit', (code) => (exited = code));
  const url = await waitFor(
    () => {
      if (exited !== undefined) throw new Error(`child exited ${exited}: ${err}`);
      return /URL (\S+)/.exec(out)?.[1];
    },
    { what: `the child's URL (stderr: ${err})`, timeoutMs: 30_000 },
  );
  return { child, url, output: () => out };
}

export interface Api {
  get(path: string): Promise<{ status: number; body: any; text: string; headers: Headers }>;
  post(path: string, body?: unknown): Promise<{ status: number; body: any; text: string; headers: Headers }>;
  patch(path: string, body: unknown): Promise<{ status: number; body: any; text: string; headers: Headers }>;
  del(path: string): Promise<{ status: number; body: any; text: string; headers: Headers }>;
}

export function api(base: string): Api {
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = text;
    }
    return { status: res.status, body: parsed as any, text, headers: res.headers };
  };
  return {
    get: (p) => call('GET', p),
    post: (p, b) => call('POST', p, b ?? {}),
    patch: (p, b) => call('PATCH', p, b),
    del: (p) => call('DELETE', p),
  };
}

/**
 * The model obeys directives in the run's query:
 *   CALL <tool> <json args>   (several, separated by ";", are one parallel batch)
 *   FAIL                      every model call fails (HTTP 400, not retried by the provider)
 *   FAILONCE:<key>            the first model call with this key fails, later ones succeed
 *   THENFAIL                  the call after the tool results fails
 * Otherwise it answers "done: <last tool result>" (after tools) or "ok".
 */
export function directModel(model: ScriptedOpenAI): void {
  const failedOnce = new Set<string>();
  model.setDefault((req: ChatCompletionRequestBody): ScriptedReply => {
    const user = [...req.messages].reverse().find((m) => m.role === 'user');
    const query = String(user?.content ?? '');
    const last = req.messages.at(-1);
    const once = /FAILONCE:(\S+)/.exec(query);
    if (once && !failedOnce.has(once[1])) {
      failedOnce.add(once[1]);
      return { status: 400, message: `scripted failure ${once[1]}` };
    }
    if (/\bFAIL\b/.test(query)) return { status: 400, message: 'scripted failure' };
    if (last?.role === 'tool') {
      if (/\bTHENFAIL\b/.test(query)) return { status: 400, message: 'scripted failure after tools' };
      return { text: `done: ${String(last.content).slice(0, 200)}` };
    }
    const calls = [...query.matchAll(/CALL (\w+)\s*(\{[^;]*\})?/g)].map((m, i) => ({
      id: `call_${i}`,
      name: m[1],
      arguments: m[2] ? (JSON.parse(m[2]) as Record<string, unknown>) : {},
    }));
    if (calls.length > 0) return { tool_calls: calls };
    return { text: 'ok' };
  });
}

const FINAL = new Set(['completed', 'failed', 'timeout', 'cancelled', 'skipped']);

/** Polls GET /background/runs/{id} until `pred` holds (default: a terminal status). */
export async function waitRun(a: Api, runId: string, pred: (run: any) => boolean = (r) => FINAL.has(r.status), timeoutMs = 15_000): Promise<any> {
  return eventually(async () => {
    const r = await a.get(`/background/runs/${runId}`);
    return r.status === 200 && pred(r.body) ? r.body : null;
  }, timeoutMs);
}

/** Asserts the replay has sequence 1..n without gaps and returns the event names in order. */
export function eventNames(events: Array<{ sequence: number; event: string }>): string[] {
  events.forEach((e, i) => {
    if (e.sequence !== i + 1) throw new Error(`sequence gap: position ${i} has sequence ${e.sequence}`);
  });
  return events.map((e) => e.event);
}
