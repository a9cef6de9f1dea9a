// POST /run and /run/sync check a keyed body's `concurrency` by hand (src/http/run-request-fast.ts)
// instead of zod's nested parse: every body must come out as RunRequest would parse it, and every
// refused one with zod's own issues (so the same 422 `loc`/`msg`/`type`). The validator the routes
// use is compared with RunRequest.safeParse body by body, then a few refusals go through HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { zodValidatorCompiler } from '../../src/http/validation.js';
import { runRequestFast } from '../../src/http/run-request-fast.js';
import { RunRequest } from '../../src/schemas/index.js';
import { RequestValidationError } from '../../src/errors.js';
import { postJson, startTestServer, type TestServer } from '../helpers/server.js';

const validate = zodValidatorCompiler({ schema: RunRequest, method: 'POST', url: '/run', httpPart: 'body' }) as (data: unknown) => {
  value?: unknown;
  error?: unknown;
};

const ok = { key: 'customer:1', limit: 2 };
const CONCURRENCY: Array<[string, unknown]> = [
  ['the usual shape', ok],
  ['limit first', { limit: 2, key: 'customer:1' }],
  ['bounds: one character, 10,000', { key: 'k', limit: 10_000 }],
  ['bounds: 256 characters, 1', { key: 'k'.repeat(256), limit: 1 }],
  ['unicode key', { key: 'kunde:ü:🙂', limit: 3 }],
  ['null', null],
  ['empty key', { key: '', limit: 2 }],
  ['257 characters', { key: 'k'.repeat(257), limit: 2 }],
  ['a control character', { key: 'a\u001fb', limit: 2 }],
  ['DEL', { key: 'a\u007fb', limit: 2 }],
  ['limit 0', { key: 'k', limit: 0 }],
  ['limit 10,001', { key: 'k', limit: 10_001 }],
  ['limit 1.5', { key: 'k', limit: 1.5 }],
  ['limit as a string', { key: 'k', limit: '2' }],
  ['key as a number', { key: 7, limit: 2 }],
  ['no limit', { key: 'k' }],
  ['no key', { limit: 2 }],
  ['an extra field', { key: 'k', limit: 2, priority: 1 }],
  ['an own __proto__ (as JSON makes it)', JSON.parse('{"key":"k","limit":2,"__proto__":{"x":1}}')],
  ['an array', ['k', 2]],
  ['a string', 'customer:1'],
  ['an empty object', {}],
];

describe('a keyed run body, checked by hand, parses as RunRequest would', () => {
  const bodies: Array<[string, unknown]> = [
    ...CONCURRENCY.map(([what, c]): [string, unknown] => [what, { query: 'q', concurrency: c }]),
    ['no key at all', { query: 'q' }],
    ['a key and every other field', { query: 'q', session_id: 's1', concurrency: ok, priority: 5, metadata: { a: 1 }, session_policy: 'reject' }],
    ['a valid key, an invalid priority', { query: 'q', concurrency: ok, priority: 101 }],
    ['a valid key, an unknown field', { query: 'q', concurrency: ok, extra: true }],
    ['a valid key, no query', { concurrency: ok }],
    ['a valid key, an empty query', { query: '', concurrency: ok }],
    ['not an object', [{ query: 'q', concurrency: ok }]],
  ];
  it.each(bodies)('%s', (_what, body) => {
    const data = JSON.parse(JSON.stringify(body)) as unknown;
    const zod = RunRequest.safeParse(JSON.parse(JSON.stringify(body)));
    const got = validate(data);
    if (zod.success) expect(got).toEqual({ value: zod.data });
    else {
      expect(got.error).toBeInstanceOf(RequestValidationError);
      expect((got.error as RequestValidationError).issues).toEqual(zod.error.issues);
    }
  });

  it('takes the hand-written path for the usual shape only (the rest is left to zod)', () => {
    expect(runRequestFast({ query: 'q', concurrency: { key: 'k', limit: 2 } })).toEqual({ query: 'q', concurrency: { key: 'k', limit: 2 } });
    for (const [, c] of CONCURRENCY.slice(5)) expect(runRequestFast({ query: 'q', concurrency: c })).toBeUndefined();
    expect(runRequestFast({ query: 'q' })).toBeUndefined();
    expect(runRequestFast({ query: 'q', concurrency: ok, priority: 101 })).toBeUndefined();
  });
});

describe('POST /run/sync refuses a malformed key with 422 AGT_ERR_VALIDATION at body.concurrency', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({}, {});
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });
  const cases: Array<[string, unknown, Array<string | number>]> = [
    ['limit 0', { key: 'k', limit: 0 }, ['body', 'concurrency', 'limit']],
    ['a control character', { key: 'a\u0001b', limit: 2 }, ['body', 'concurrency', 'key']],
    ['an extra field', { key: 'k', limit: 2, extra: 1 }, ['body', 'concurrency', 'extra']],
    ['limit as a string', { key: 'k', limit: '2' }, ['body', 'concurrency', 'limit']],
  ];
  it.each(cases)('%s', async (_what, concurrency, loc) => {
    const r = await postJson(`${server.url}/run/sync`, { query: 'q', concurrency });
    expect(r.status).toBe(422);
    expect(r.body.code).toBe('AGT_ERR_VALIDATION');
    expect(r.body.detail).toHaveLength(1);
    expect(r.body.detail[0].loc).toEqual(loc);
    expect(typeof r.body.detail[0].msg).toBe('string');
    expect(typeof r.body.detail[0].type).toBe('string');
  });
});
