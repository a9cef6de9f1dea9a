// Every error body carries its AGT_ERR_* code beside the spec's shape, through HTTP against a real
// server: a 404 of each kind, 401/403 from auth, 422, a 409 of the background manager.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorResponse, HTTPValidationError } from '../../src/schemas/index.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({
    auth: {
      api_keys: [
        { name: 'reader', role: 'reader', key_sha256: sha('key-reader-1') },
        { name: 'admin', role: 'admin', key_sha256: sha('key-admin-1') },
      ],
    },
    background: { poll_interval_ms: 50 },
  });
});
afterAll(async () => {
  await server.stop();
  server.cleanup();
});

const admin = { authorization: 'Bearer key-admin-1' };

describe('AGT_ERR_* codes in error bodies', () => {
  it('names the missing resource', async () => {
    const run = await getJson(`${server.url}/runs/run_nope`, admin);
    expect(run.status).toBe(404);
    expect(ErrorResponse.parse(run.body)).toMatchObject({ error: 'NotFound', code: 'AGT_ERR_RUN_NOT_FOUND' });
    const task = await getJson(`${server.url}/background/tasks/nope`, admin);
    expect(task.body).toMatchObject({ error: 'NotFound', code: 'AGT_ERR_BACKGROUND_TASK_NOT_FOUND' });
    const route = await getJson(`${server.url}/no/such/route`, admin);
    expect(route.body).toMatchObject({ error: 'NotFound', code: 'AGT_ERR_ROUTE_NOT_FOUND', message: 'no route GET /no/such/route' });
  });

  it('tells a missing key, a bad key and a role too weak apart', async () => {
    const none = await getJson(`${server.url}/runs/run_nope`);
    expect(none.body).toMatchObject({ error: 'Unauthorized', code: 'AGT_ERR_UNAUTHORIZED' });
    const bad = await getJson(`${server.url}/runs/run_nope`, { authorization: 'Bearer wrong' });
    expect(bad.body).toMatchObject({ error: 'Unauthorized', code: 'AGT_ERR_API_KEY_INVALID' });
    const weak = await postJson(`${server.url}/background/agents`, { agent_id: 'x' }, { authorization: 'Bearer key-reader-1' });
    expect(weak.status).toBe(403);
    expect(weak.body).toMatchObject({ error: 'Forbidden', code: 'AGT_ERR_FORBIDDEN' });
  });

  it('adds the validation code to a 422 without changing its detail', async () => {
    const r = await postJson(`${server.url}/run/sync`, { query: 42 }, admin);
    expect(r.status).toBe(422);
    expect(HTTPValidationError.parse(r.body).detail[0].loc).toEqual(['body', 'query']);
    expect(r.body.code).toBe('AGT_ERR_VALIDATION');
  });

  it('names the conflict of a duplicate background agent and keeps its detail', async () => {
    const spec = { agent_id: 'dup', name: 'Dup', system_instruction: 'x', model_config: { model: 'x' } };
    expect((await postJson(`${server.url}/background/agents`, { spec }, admin)).status).toBe(200);
    const again = await postJson(`${server.url}/background/agents`, { spec }, admin);
    expect(again.status).toBe(409);
    expect(again.body).toEqual({
      error: 'Conflict',
      code: 'AGT_ERR_BACKGROUND_AGENT_EXISTS',
      message: "background agent 'dup' is already registered",
      detail: 'pass replace: true to replace it',
    });
  });
});
