// Concurrency keys live in the tenant's namespace (docs/flow-control.md, docs/multi-tenant.md):
// two tenants naming the same key have a queue and slots each, so one tenant's backlog never
// holds the other's run, and a queue position counts only the tenant's own runs.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { useScriptedOpenAI } from '../helpers/scripted-model.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

let model: ScriptedOpenAI;
useScriptedOpenAI((m) => (model = m));

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const acme = { authorization: 'Bearer k-acme' };
const beta = { authorization: 'Bearer k-beta' };

describe('concurrency keys per tenant', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(
      {
        auth: {
          api_keys: [
            { name: 'acme-op', role: 'operator', tenant: 'acme', key_sha256: sha('k-acme') },
            { name: 'beta-op', role: 'operator', tenant: 'beta', key_sha256: sha('k-beta') },
          ],
        },
      },
      { modelUrl: model.url },
    );
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });

  it("one tenant's full key never holds another tenant's run of the same key name", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    model.setDefault((req) => (String(req.messages.at(-1)?.content ?? '').startsWith('acme') ? { text: 'acme done', holdUntil: held } : { text: 'beta done' }));
    const key = { key: 'customer:1', limit: 1 };
    const first = postJson(`${server.url}/run/sync`, { query: 'acme first', concurrency: key }, acme);
    await eventually(() => model.inFlight() === 1, 5000, "acme's first call");
    const second = postJson(`${server.url}/run/sync`, { query: 'acme second', concurrency: key }, acme);
    const queued = await eventually(async () => {
      const r = (await getJson(`${server.url}/runs?status=queued`, acme)).body.runs;
      return r.length === 1 ? r[0] : null;
    });
    // acme's own view: its key as it named it, first in its own queue.
    const view = (await getJson(`${server.url}/runs/${queued.run_id}`, acme)).body;
    expect(view.queue).toEqual({ key: 'customer:1', position: 1 });
    expect(view.concurrency).toEqual(key);

    // beta's run on the same key name starts at once and ends while acme's key is full.
    const other = await postJson(`${server.url}/run/sync`, { query: 'beta run', concurrency: key }, beta);
    expect(other.status).toBe(200);
    expect(other.body.status).toBe('success');
    expect(other.body.response).toBe('beta done');

    release();
    expect((await first).body.status).toBe('success');
    expect((await second).body.status).toBe('success');
  });

  it("refuses a key with a control character (the tenant separator could spell another tenant's key) with 422", async () => {
    const r = await postJson(`${server.url}/run/sync`, { query: 'beta sneaky', concurrency: { key: 'acme\u001fcustomer:1', limit: 5 } }, beta);
    expect(r.status).toBe(422);
    expect(r.body.detail[0].loc).toEqual(['body', 'concurrency', 'key']);
  });
});
