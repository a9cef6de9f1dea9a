// What acting in a tenant adds to a run's writes (docs/multi-tenant.md "What a tenant's run
// costs"): the same records in the same commits and the same events, and on the run's record two
// more index values (`tenant`, `tenant_status`) and nothing else. A change that gave tenant runs
// more postings per status, an extra read-modify-write or extra events fails here, before the
// tenants benchmark (POST /run within 5 % of a global key) would show it.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { postJson, startTestServer, type TestServer } from '../helpers/server.js';
import type { CommitEvents, CommitOps, WriteOp } from '../../src/store/store.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
let model: ScriptedOpenAI;
let s: TestServer;

interface Written {
  commits: Array<Array<{ op: string; kind: string; id: string; indexes: string[] }>>;
  events: string[];
}
let current: Written | null = null;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault(() => ({ text: 'ok' }));
  s = await startTestServer(
    {
      auth: {
        api_keys: [
          { name: 'global', role: 'operator', key_sha256: sha('cost-global') },
          { name: 'acme', role: 'operator', tenant: 'acme', key_sha256: sha('cost-acme') },
        ],
      },
      agent: { tools: { builtin: [] } },
      background: { enabled: false },
    },
    { modelUrl: model.url },
  );
  // Every commit and event of the store while a run is measured (the ops as the store takes them).
  const store = s.store;
  const note = (list: WriteOp[]): WriteOp[] => {
    current?.commits.push(
      list.map((o) => {
        const ix = o.op === 'create' || o.op === 'update' ? (o.indexes ?? {}) : {};
        return {
          op: o.op,
          kind: o.kind,
          id: o.id,
          indexes: Object.keys(ix)
            .filter((k) => ix[k] != null)
            .sort(),
        };
      }),
    );
    return list;
  };
  const take = (ops: CommitOps): CommitOps => (typeof ops === 'function' ? () => note(ops()) : note(ops));
  const commit = store.commit.bind(store);
  store.commit = (ops: CommitOps) => commit(take(ops));
  const withEvents = store.commitWithEvents.bind(store);
  store.commitWithEvents = (ops: CommitOps, events: CommitEvents) =>
    withEvents(take(ops), () => {
      const list = typeof events === 'function' ? events() : events;
      current?.events.push(...list.map((e) => String(e.event_type)));
      return list;
    });
  const append = store.appendEvents.bind(store);
  store.appendEvents = (events) => {
    current?.events.push(...events.map((e) => String(e.event_type)));
    return append(events);
  };
});

afterAll(async () => {
  await s?.stop();
  s?.cleanup();
  await model?.close();
});

async function measure(key: string): Promise<{ runId: string; written: Written }> {
  current = { commits: [], events: [] };
  const r = await postJson(`${s.url}/run/sync`, { query: 'hello' }, { authorization: `Bearer ${key}` });
  expect(r.status).toBe(200);
  // The run's writes are all in before /run/sync answers (its end is durable first).
  const written = current;
  current = null;
  return { runId: r.body.run_id, written };
}

/**
 * What a run wrote, whatever the commits it took (how many depends on timing: a run slower than
 * the creating write's fold takes two): each record it touched (its own ids replaced, a tenant's
 * session key read as its id) with the index names it was written with, and its events in order.
 */
function footprint(w: Written, runId: string, sessionId: string): { records: Record<string, string[]>; events: string[] } {
  const name = (id: string) =>
    id
      .replace(/^acme\u001f/, '')
      .replaceAll(runId, '<run>')
      .replaceAll(sessionId, '<session>')
      .replace(/^trace_.*/, '<trace>');
  const records: Record<string, Set<string>> = {};
  for (const o of w.commits.flat()) for (const ix of o.indexes) (records[`${o.kind}:${name(o.id)}`] ??= new Set()).add(ix);
  for (const o of w.commits.flat()) records[`${o.kind}:${name(o.id)}`] ??= new Set();
  return { records: Object.fromEntries(Object.entries(records).map(([k, v]) => [k, [...v].sort()])), events: w.events };
}

it("writes a tenant's run like a global key's, with two more index values on its record", async () => {
  await measure('cost-global'); // warm: the first run of a process reads what later ones find cached
  await measure('cost-acme');
  const session = async (runId: string, key: string): Promise<string> => {
    const view = (await (await fetch(`${s.url}/runs/${runId}`, { headers: { authorization: `Bearer ${key}` } })).json()) as { session_id: string };
    return view.session_id;
  };
  const g = await measure('cost-global');
  const t = await measure('cost-acme');
  const gf = footprint(g.written, g.runId, await session(g.runId, 'cost-global'));
  const tf = footprint(t.written, t.runId, await session(t.runId, 'cost-acme'));
  expect(gf.records['runs:<run>']).toEqual(['session_id', 'status']);
  expect(tf).toEqual({ ...gf, records: { ...gf.records, 'runs:<run>': ['session_id', 'status', 'tenant', 'tenant_status'] } });
});
