// Pure parts of idempotency and webhooks: the signature (the published Standard Webhooks test
// vector), the host allowlist, event mapping, canonical request hashing, and key expiry with a
// manual clock on the memory store.
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import { MemoryStore } from '../../src/store/memory.js';
import { canonicalJson, Idempotency, keyOfHeaders, recordIdOf, requestHashOf } from '../../src/integrations/idempotency.js';
import { deriveWebhook, hostAllowed, signWebhook } from '../../src/integrations/webhook-events.js';
import { StoreError, type RecordIndexes, type RecordKind, type StoredEvent, type Versioned } from '../../src/store/store.js';

describe('signWebhook', () => {
  it('reproduces the Standard Webhooks reference vector', () => {
    expect(signWebhook('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}')).toBe(
      'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    );
  });
});

describe('hostAllowed', () => {
  const ok = (u: string, allow: string[]) => hostAllowed(new URL(u), allow);
  it('matches hosts, wildcard subdomains and host:port', () => {
    expect(ok('https://hooks.example.com/x', ['hooks.example.com'])).toBe(true);
    expect(ok('https://hooks.example.com:8443/x', ['hooks.example.com'])).toBe(true);
    expect(ok('https://evil.com/x', ['hooks.example.com'])).toBe(false);
    expect(ok('https://a.partner.example/x', ['*.partner.example'])).toBe(true);
    expect(ok('https://partner.example/x', ['*.partner.example'])).toBe(false);
    expect(ok('https://evilpartner.example/x', ['*.partner.example'])).toBe(false);
    expect(ok('http://10.0.0.5:8443/x', ['10.0.0.5:8443'])).toBe(true);
    expect(ok('http://10.0.0.5:9000/x', ['10.0.0.5:8443'])).toBe(false);
    expect(ok('http://10.0.0.5/x', ['10.0.0.5:80'])).toBe(true);
    expect(ok('http://169.254.169.254/latest', ['hooks.example.com'])).toBe(false);
  });
});

describe('deriveWebhook', () => {
  const ev = (e: Partial<StoredEvent>): StoredEvent => ({
    event_id: 'event_1',
    event_type: 'x',
    timestamp: '2026-01-01T00:00:00.000Z',
    cursor: '0000000000000001',
    run_id: 'run_1',
    session_id: 's',
    ...e,
  });
  it('maps run and background events; ignores the rest', () => {
    expect(deriveWebhook(ev({ event_type: 'final_answer', output: { response: 'hi' } }))).toMatchObject({
      type: 'run.completed',
      data: { run_id: 'run_1', response: 'hi' },
    });
    expect(deriveWebhook(ev({ event_type: 'runtime_error', metadata: { status: 'cancelled' } }))?.type).toBe('run.cancelled');
    expect(deriveWebhook(ev({ event_type: 'runtime_error', metadata: { status: 'timeout' } }))).toMatchObject({
      type: 'run.failed',
      data: { status: 'timeout' },
    });
    expect(deriveWebhook(ev({ event_type: 'budget_exhausted', metadata: { on_exhausted: 'pause' } }))?.type).toBe('run.awaiting_budget');
    expect(deriveWebhook(ev({ event_type: 'budget_exhausted', metadata: { on_exhausted: 'terminate' } }))).toBeNull();
    expect(deriveWebhook(ev({ event_type: 'background_run_completed', metadata: { status: 'completed', run_id: 'bgrun_1' }, run_id: null }))).toMatchObject({
      type: 'background_run.completed',
      data: { run_id: 'bgrun_1' },
    });
    expect(deriveWebhook(ev({ event_type: 'tool_call' }))).toBeNull();
  });
  it('a blocked query ends the run (run.failed); a refused steer message does not (the run goes on)', () => {
    expect(deriveWebhook(ev({ event_type: 'guardrail_violation' }))?.type).toBe('run.failed');
    expect(deriveWebhook(ev({ event_type: 'guardrail_violation', metadata: { source: 'steer', run_id: 'run_1' } }))).toBeNull();
  });
  it('one approval webhook per paused batch', () => {
    const a = deriveWebhook(ev({ event_type: 'policy_decision_ask', event_id: 'e1', parent_span_id: 'span_step' }));
    const b = deriveWebhook(ev({ event_type: 'policy_decision_ask', event_id: 'e2', parent_span_id: 'span_step' }));
    expect(a?.dedupe).toBe(b?.dedupe);
  });
});

describe('idempotency keys', () => {
  it('canonical JSON ignores key order and undefined fields', () => {
    expect(canonicalJson({ b: 1, a: [{ y: 2, x: 1 }], c: undefined })).toBe('{"a":[{"x":1,"y":2}],"b":1}');
    expect(requestHashOf({ method: 'POST', path: '/run', body: { query: 'q', session_id: 's' } })).toBe(
      requestHashOf({ method: 'POST', path: '/run', body: { session_id: 's', query: 'q' } }),
    );
    expect(requestHashOf({ method: 'POST', path: '/run', body: { query: 'q' } })).not.toBe(
      requestHashOf({ method: 'POST', path: '/run/sync', body: { query: 'q' } }),
    );
    expect(recordIdOf('alice', 'k')).not.toBe(recordIdOf('bob', 'k'));
  });

  it('refuses empty, over-long and non-ASCII keys', () => {
    expect(keyOfHeaders({})).toBeNull();
    expect(keyOfHeaders({ 'idempotency-key': 'a'.repeat(255) })).toBe('a'.repeat(255));
    for (const bad of ['', 'a'.repeat(256), 'with space', 'naïve']) expect(() => keyOfHeaders({ 'idempotency-key': bad })).toThrow();
  });

  it('a key expires after its TTL: the sweep deletes it and the key may be used for a new request', async () => {
    const store = new MemoryStore();
    await store.open();
    const clock = new ManualClock();
    const idem = new Idempotency({ store, clock, workerId: 'worker_a', ttlSeconds: 60, sharedStore: false });
    const req = { principal: 'anonymous', key: 'k1', operation: 'cancelRun', method: 'POST', path: '/runs/r/cancel', body: null };
    let calls = 0;
    const exec = async () => ({ n: ++calls });
    expect(await idem.respondOnce(req, exec)).toEqual({ n: 1 });
    expect(await idem.respondOnce(req, exec)).toEqual({ n: 1 });
    await expect(idem.respondOnce({ ...req, path: '/runs/other/cancel' }, exec)).rejects.toMatchObject({ statusCode: 422 });
    clock.advance(30_000);
    expect(await idem.sweep()).toBe(0);
    clock.advance(31_000);
    expect(await idem.sweep()).toBe(1);
    expect(await store.countRecords('idempotency')).toBe(0);
    expect(await idem.respondOnce({ ...req, path: '/runs/other/cancel' }, exec)).toEqual({ n: 2 });
    await store.close();
  });

  it('a failed request forgets its key (a retry runs again)', async () => {
    const store = new MemoryStore();
    await store.open();
    const idem = new Idempotency({ store, clock: new ManualClock(), workerId: 'worker_a', ttlSeconds: 60, sharedStore: false });
    const req = { principal: 'anonymous', key: 'k2', operation: 'runSync', method: 'POST', path: '/run/sync', body: { query: 'q' } };
    await expect(
      idem.startOnce(
        req,
        () => 'run_1',
        async () => false,
        async () => {
          throw new Error('busy');
        },
      ),
    ).rejects.toThrow('busy');
    const ok = await idem.startOnce(
      req,
      () => 'run_2',
      async () => false,
      async (id) => id,
    );
    expect(ok).toEqual({ fresh: true, target_id: 'run_2', started: 'run_2' });
    const again = await idem.startOnce(
      req,
      () => 'run_3',
      async () => true,
      async (id) => id,
    );
    expect(again).toEqual({ fresh: false, target_id: 'run_2' });
    await store.close();
  });

  /** A memory store on which the first `losses` creations of an idempotency record lose a race. */
  class RacedStore extends MemoryStore {
    creates = 0;
    constructor(private readonly losses: number) {
      super();
    }
    override createRecord<T>(kind: RecordKind, id: string, value: T, indexes?: RecordIndexes): Promise<Versioned<T>> {
      if (kind === 'idempotency' && ++this.creates <= this.losses) return Promise.reject(new StoreError('conflict', 'created by another request'));
      return super.createRecord(kind, id, value, indexes);
    }
  }

  it('a key whose record keeps being taken by concurrent requests is refused after five tries (409), one taken once is retried', async () => {
    const req = { principal: 'anonymous', key: 'k3', operation: 'cancelRun', method: 'POST', path: '/runs/r/cancel', body: null };
    const lost = new RacedStore(Infinity);
    await lost.open();
    const refused = new Idempotency({ store: lost, clock: new ManualClock(), workerId: 'worker_a', ttlSeconds: 60, sharedStore: false });
    await expect(refused.respondOnce(req, async () => 'ran')).rejects.toMatchObject({ status: 409 });
    expect(lost.creates).toBe(5);
    await lost.close();

    const once = new RacedStore(1);
    await once.open();
    const retried = new Idempotency({ store: once, clock: new ManualClock(), workerId: 'worker_a', ttlSeconds: 60, sharedStore: false });
    expect(await retried.respondOnce(req, async () => 'ran')).toBe('ran');
    expect(once.creates).toBe(2);
    await once.close();
  });
});

describe('webhooks config', () => {
  it('resolves signing secrets by env-var name or value, never printable; refuses a missing one', async () => {
    const { configFromObject, ConfigError } = await import('../../src/config.js');
    const { configCheckJson } = await import('../../src/telemetry/secrets.js');
    const value = 'inline-secret-value-0123456789';
    const c = configFromObject(
      {
        webhooks: {
          endpoints: [
            { url: 'https://a.example/h', secret_env: 'HOOK' },
            { url: 'https://b.example/h', secret: value },
          ],
          allow_request_hosts: ['x.example'],
          request_secret_env: 'REQ',
        },
      },
      { env: { HOOK: 'env-secret-value-0123456789', REQ: 'req-secret-value-0123456789' }, dataDir: '/tmp/x' },
    );
    expect(c.webhooks.endpoints.map((e) => e.signing_secret)).toEqual(['env-secret-value-0123456789', value]);
    expect(c.webhooks.request_signing_secret).toBe('req-secret-value-0123456789');
    const printed = JSON.stringify(c) + configCheckJson(c);
    for (const secret of ['env-secret-value-0123456789', 'req-secret-value-0123456789', value]) expect(printed).not.toContain(secret);
    expect(() => configFromObject({ webhooks: { endpoints: [{ url: 'https://a.example/h', secret_env: 'NOPE' }] } }, { env: {}, dataDir: '/tmp/x' })).toThrow(
      ConfigError,
    );
    expect(() => configFromObject({ webhooks: { endpoints: [{ url: 'https://a.example/h' }] } }, { env: {}, dataDir: '/tmp/x' })).toThrow(
      /signing secret is required/,
    );
    expect(() => configFromObject({ webhooks: { allow_request_hosts: ['x.example'] } }, { env: {}, dataDir: '/tmp/x' })).toThrow(/request_secret/);
  });
});
