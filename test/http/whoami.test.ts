// GET /whoami over real HTTP: the key's name, role and tenant with auth on (401 without a valid key), and
// no name with the role every caller has when auth is off (docs/contract.md §1).
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getJson, startTestServer, type TestServer } from '../helpers/server.js';
import { WhoAmIResponse } from '../../src/schemas/index.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const KEYS = { alice: 'whoami-alice-key-0001', bob: 'whoami-bob-key-00002', carol: 'whoami-carol-key-0003' };

describe('GET /whoami', () => {
  let keyed: TestServer;
  let open: TestServer;
  beforeAll(async () => {
    [keyed, open] = await Promise.all([
      startTestServer({
        auth: {
          api_keys: [
            { name: 'alice', role: 'approver', key_sha256: sha(KEYS.alice) },
            { name: 'bob', role: 'reader', key_sha256: sha(KEYS.bob) },
            { name: 'carol', role: 'operator', key_sha256: sha(KEYS.carol), tenant: 'acme' },
          ],
        },
      }),
      startTestServer({}),
    ]);
  });
  afterAll(async () => {
    for (const s of [keyed, open]) {
      await s?.stop();
      s?.cleanup();
    }
  });

  it("answers each key's name and role", async () => {
    const alice = await getJson(`${keyed.url}/whoami`, { authorization: `Bearer ${KEYS.alice}` });
    expect(alice.status).toBe(200);
    expect(WhoAmIResponse.parse(alice.body)).toEqual({ name: 'alice', role: 'approver', auth: true, tenant: null });
    const bob = await getJson(`${keyed.url}/whoami`, { authorization: `Bearer ${KEYS.bob}` });
    expect(bob.body).toEqual({ name: 'bob', role: 'reader', auth: true, tenant: null });
  });

  it('answers the tenant a key acts in: its own, or the one a global key names (docs/multi-tenant.md)', async () => {
    const carol = await getJson(`${keyed.url}/whoami`, { authorization: `Bearer ${KEYS.carol}` });
    expect(carol.status).toBe(200);
    expect(carol.body).toEqual({ name: 'carol', role: 'operator', auth: true, tenant: 'acme' });
    const alice = await getJson(`${keyed.url}/whoami`, { authorization: `Bearer ${KEYS.alice}`, 'x-agentd-tenant': 'globex' });
    expect(alice.body.tenant).toBe('globex');
    const mismatch = await getJson(`${keyed.url}/whoami`, { authorization: `Bearer ${KEYS.carol}`, 'x-agentd-tenant': 'globex' });
    expect(mismatch.status).toBe(403);
    expect(mismatch.body.code).toBe('AGT_ERR_TENANT_MISMATCH');
  });

  it('is 401 without a key or with a wrong one', async () => {
    const [none, wrong] = await Promise.all([getJson(`${keyed.url}/whoami`), getJson(`${keyed.url}/whoami`, { authorization: 'Bearer nope-nope-nope' })]);
    expect(none.status).toBe(401);
    expect(none.body.code).toBe('AGT_ERR_UNAUTHORIZED');
    expect(wrong.status).toBe(401);
    expect(wrong.body.code).toBe('AGT_ERR_API_KEY_INVALID');
  });

  it('with auth off: no name, and the admin role every caller has', async () => {
    const r = await getJson(`${open.url}/whoami`);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ name: null, role: 'admin', auth: false, tenant: null });
  });
});
