// Secrets inside strings and configured secret values (finding 9). Each
// credential shape is checked through redact() and createEventRecord(), the functions every
// stored event goes through; then what must stay untouched (prose, ids, hashes, token counts).
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import { MAX_PAYLOAD_BYTES, REDACTED, Redactor, capturePayload, redact } from '../../src/telemetry/redact.js';
import { createEventRecord } from '../../src/telemetry/record.js';

const clock = new ManualClock(Date.parse('2026-03-04T05:06:07.890Z'));

// Built from pieces so no scanner mistakes this file for a leak.
const GHP = 'ghp_' + 'A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8';
const GITHUB_PAT = 'github_pat_' + '11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX';
const OPENAI = 'sk-' + 'proj-Abc123def456ghi789jkl012mno345';
const OPENAI_LEGACY = 'sk-' + 'a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V2w3X4';
const ANTHROPIC = 'sk-' + 'ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-AbCdEf';
const AWS = 'AKIA' + 'IOSFODNN7EXAMPLE';
const AWS_STS = 'ASIA' + 'Y34FZKBOKMUTVV7A';
const SLACK_BOT = 'xoxb-' + '123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx';
const SLACK_USER = 'xoxp-' + '123456789012-123456789012-123456789012-0123456789abcdef0123456789abcdef';
const GOOGLE = 'AIza' + 'SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q';
const JWT = 'eyJ' + 'hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U';
const PEM = [
  '-----BEGIN RSA PRIVATE KEY-----',
  'MIIEowIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi8Z0m3fHVwq7pL3mFkZ9yQ1b2c',
  'q7pL3mFkZ9yQ1b2cMIIEowIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi8Z0m3fHVw',
  '-----END RSA PRIVATE KEY-----',
].join('\n');

/** Redacted as a string on its own, as an event's output and inside the model_call input's message text. */
function everywhere(text: string): string[] {
  const asString = redact(text) as string;
  const event = createEventRecord(
    {
      event_type: 'model_call',
      trace_id: 'trace_1',
      span_id: 'span_1',
      actor: { type: 'model', id: 'm' },
      input: { messages: 3, last: { role: 'tool', tool_call_id: 'call_1', content: text } },
      output: text,
      error: { type: 'ModelError', message: text },
      metadata: { run_id: 'run_1', note: text },
    },
    { capture: 'full' },
    clock,
  );
  return [asString, (event.input as any).last.content, event.output as string, event.error!.message, event.metadata.note as string];
}

describe('value patterns: secrets inside strings are redacted', () => {
  const cases: Array<[string, string, string]> = [
    // [name, text, the secret that must be gone]
    ['Bearer token', `curl -H "Authorization: Bearer ${OPENAI}" https://api`, OPENAI],
    ['bare Bearer JWT', `sent Bearer ${JWT} upstream`, JWT],
    ['Bearer token without a digit, 20+ chars', 'Bearer abcdefghijklmnopqrstuvwxyzABCD', 'abcdefghijklmnopqrstuvwxyzABCD'],
    ['Authorization header line', 'Authorization: Basic dXNlcjpodW50ZXIyLXN1cGVyLXNlY3JldA==\nAccept: */*', 'dXNlcjpodW50ZXIyLXN1cGVyLXNlY3JldA=='],
    ['Authorization in JSON text', '{"headers":{"Authorization":"Token tkn_8d7f6e5d4c3b2a19","Accept":"json"}}', 'tkn_8d7f6e5d4c3b2a19'],
    ['Cookie header line', 'Cookie: session=9f8e7d6c5b4a; theme=dark', 'session=9f8e7d6c5b4a'],
    ['password=', 'login ok with user=admin&password=hunter2-horse&next=/', 'hunter2-horse'],
    ['password: quoted with spaces', 'db_password: "correct horse battery staple"', 'correct horse battery staple'],
    ['JSON text key', '{"user":"ann","password":"hunter2-xyzzy","ok":true}', 'hunter2-xyzzy'],
    ['JSON text inside a JSON string', '{"body":"{\\"api_key\\":\\"k3y-v4lu3-0987\\"}"}', 'k3y-v4lu3-0987'],
    ['env line', `OPENAI_API_KEY=${OPENAI_LEGACY}`, OPENAI_LEGACY],
    ['camelCase key', 'clientSecret: s3cr3t-valu3', 's3cr3t-valu3'],
    ['access_token in a query string', 'GET /cb?code=1&access_token=ya29.a0AfH6SMBx9&state=z', 'ya29.a0AfH6SMBx9'],
    ['token key', 'githubToken=abc123def456', 'abc123def456'],
    ['URL password', 'connect postgres://agentd:s3cr3tP4ss@db:5432/agentd failed', 's3cr3tP4ss'],
    ['AWS access key id', `aws_access_key_id = ${AWS}`, AWS],
    ['AWS STS key id in prose', `the role returned ${AWS_STS} for this session`, AWS_STS],
    ['AWS secret access key', 'aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'],
    ['GitHub classic token', `token is ${GHP}.`, GHP],
    ['GitHub fine-grained token', `use ${GITHUB_PAT}`, GITHUB_PAT],
    ['OpenAI project key', `key ${OPENAI} leaked`, OPENAI],
    ['Anthropic key', `x-api-key header was ${ANTHROPIC}`, ANTHROPIC],
    ['Slack bot token', `slack ${SLACK_BOT}`, SLACK_BOT],
    ['Slack user token', `slack ${SLACK_USER}`, SLACK_USER],
    ['Google API key', `maps?key=${GOOGLE}`, GOOGLE],
    ['JWT', `id_token ${JWT}`, JWT],
    ['PEM private key', `here:\n${PEM}\nbye`, 'MIIEowIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi8Z0m3fHVwq7pL3mFkZ9yQ1b2c'],
    [
      'PEM private key cut before its END line',
      `${PEM.split('\n').slice(0, 2).join('\n')}`,
      'MIIEowIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi8Z0m3fHVwq7pL3mFkZ9yQ1b2c',
    ],
  ];
  it.each(cases)('%s', (_name, text, secret) => {
    for (const out of everywhere(text)) {
      expect(out).not.toContain(secret);
      expect(out).toContain(REDACTED);
    }
  });

  it('keeps the key name, the scheme and the quotes, so the text still reads (and JSON text stays JSON)', () => {
    expect(redact('{"user":"ann","password":"hunter2-xyzzy","ok":true}')).toBe(`{"user":"ann","password":"${REDACTED}","ok":true}`);
    expect(JSON.parse(redact('{"user":"ann","password":"hunter2-xyzzy"}') as string)).toEqual({ user: 'ann', password: REDACTED });
    expect(redact(`Authorization: Bearer ${OPENAI}`)).toBe(`Authorization: ${REDACTED}`);
    expect(redact(`Bearer ${OPENAI}`)).toBe(`Bearer ${REDACTED}`);
    expect(redact('password=hunter2&x=1')).toBe(`password=${REDACTED}&x=1`);
    expect(redact('postgres://u:pw123456@h/db')).toBe(`postgres://u:${REDACTED}@h/db`);
    expect(redact(`a ${AWS} b`)).toBe(`a ${REDACTED} b`);
  });

  it('is idempotent: redacting redacted text changes nothing', () => {
    for (const [, text] of cases) {
      const once = redact(text) as string;
      expect(redact(once)).toBe(once);
    }
  });

  it('redacts before truncating: the preview of a 64 KB+ payload holds no secret', () => {
    const big = `${'x'.repeat(10_000)} password=hunter2-horse ${'y'.repeat(MAX_PAYLOAD_BYTES)}`;
    const out = capturePayload({ text: big }, 'full') as { truncated: boolean; preview: string };
    expect(out.truncated).toBe(true);
    expect(out.preview).not.toContain('hunter2-horse');
    expect(out.preview).toContain(`password=${REDACTED}`);
  });
});

describe('value patterns: ordinary text is left alone', () => {
  const untouched = [
    'Your password must be at least 8 characters long; the secret to a good one is length.',
    'The bearer of this letter is a friend. Bearer authentication sends tokens.',
    'Authorization is required for this route.',
    'usage: input_tokens: 512, output_tokens: 128, total_tokens=640, max_tokens=1024, token: 300, tokens: 12',
    '{"prompt_tokens":12,"completion_tokens":5,"token_usage":{"total":17}}',
    'run 3f2c5d4e-8a1b-4c2d-9e3f-0a1b2c3d4e5f finished',
    'sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 and commit 75d9f97a1c2e3b4d5f6a7b8c9d0e1f2a3b4c5d6e',
    'ids run_V1StGXR8Z5jdHi6B-myT, trace_abc123DEF456ghi789, event_0123456789abcdefghijk',
    'We use sk-learn-compatible-estimators and scikit-learn for the risk-assessment-of-2026.',
    'Visit https://example.com:8443/path?q=1 or mail ann@example.com; see http://host/a@b.',
    'The secretary said: the cookies are in the jar. Passwords: see the policy document.',
    'Tokenizer settings: tokenizer=cl100k_base',
    '',
  ];
  it.each(untouched)('%j', (text) => {
    for (const out of everywhere(text)) expect(out).toBe(text);
  });

  it('returns the very same string when nothing matched (no copy on the hot path)', () => {
    const text = 'a perfectly ordinary sentence with nothing secret in it at all';
    expect(new Redactor(['configured-secret-value']).text(text)).toBe(text);
  });
});

describe('configured secrets (Redactor built from the config)', () => {
  const key = 'mdl-key-7Qx2vK9pLm4Rt8Zw'; // matches no value pattern: only the registry finds it
  const redactor = new Redactor([key, 'otlp-header-value-123', 'true', '1', 'short']);

  it('scrubs every known value wherever it appears, in any field', () => {
    const text = `401 Unauthorized: invalid key ${key} (header X-Key: ${key})`;
    expect(redactor.text(text)).toBe(`401 Unauthorized: invalid key ${REDACTED} (header X-Key: ${REDACTED})`);
    const r = createEventRecord(
      {
        event_type: 'model_error',
        trace_id: 't',
        span_id: 's',
        actor: { type: 'model', id: 'm' },
        output: { nested: [{ text: `echo ${key}` }] },
        error: { type: 'auth', message: text },
        metadata: { run_id: 'r', body: `otlp-header-value-123!` },
      },
      { capture: 'full', redactor },
      clock,
    );
    expect(JSON.stringify(r)).not.toContain(key);
    expect(JSON.stringify(r)).not.toContain('otlp-header-value-123');
  });

  it('ignores values too short to mean anything (< 8 characters)', () => {
    expect(redactor.secrets).toEqual([key, 'otlp-header-value-123']);
    expect(redactor.text('true 1 short')).toBe('true 1 short');
  });

  it('takes values with regular-expression characters literally', () => {
    const odd = new Redactor(['a.b*c+d?(e)[f]{g}|h^$\\/-']);
    expect(odd.text('x a.b*c+d?(e)[f]{g}|h^$\\/- y')).toBe(`x ${REDACTED} y`);
    expect(odd.text('x aXbbbcdde y')).toBe('x aXbbbcdde y');
  });
});

// sanitize keeps the path it is inside of in one array for every call (src/telemetry/redact.ts
// PATH), not a Set per payload: cycles are still found at any depth, a redact() called again from
// within a value's toJSON finds its own cycles and none of the outer call's, and the path is left
// empty after a throw.
describe('redact: the path of ancestors', () => {
  it('finds a cycle deep down, keeps siblings that share an object, and makes no Set', () => {
    const Real = globalThis.Set;
    let made = 0;
    globalThis.Set = class extends Real<unknown> {
      constructor(it?: Iterable<unknown> | null) {
        super(it);
        made++;
      }
    } as SetConstructor;
    try {
      const root: Record<string, unknown> = { name: 'root' };
      const leafObj = { v: 1 };
      root.child = { a: leafObj, b: leafObj, deeper: { back: root, list: [leafObj, root] } };
      expect(redact(root)).toEqual({
        name: 'root',
        child: { a: { v: 1 }, b: { v: 1 }, deeper: { back: '[Circular]', list: [{ v: 1 }, '[Circular]'] } },
      });
      expect(capturePayload({ x: [1, 2, { y: 'z' }] }, 'full')).toEqual({ x: [1, 2, { y: 'z' }] });
    } finally {
      globalThis.Set = Real;
    }
    expect(made).toBe(0);
  });

  it('a redact() from within a toJSON sees its own ancestors only', () => {
    const child: Record<string, unknown> = {};
    const selfRef: Record<string, unknown> = { v: 1 };
    selfRef.me = selfRef;
    let inside = false;
    child.inner = {
      toJSON: () => {
        if (inside) return 'again';
        inside = true;
        try {
          // `child` is an ancestor of the outer call here, not of this one.
          return redact({ c: child, cyc: selfRef, text: 'password=hunter2-horse' });
        } finally {
          inside = false;
        }
      },
    };
    expect(redact({ child })).toEqual({
      child: { inner: { c: { inner: 'again' }, cyc: { v: 1, me: '[Circular]' }, text: `password=${REDACTED}` } },
    });
  });

  it('a toJSON that throws leaves nothing behind: the next payload is not called circular', () => {
    const shared = { v: 2 };
    const bad = {
      s: shared,
      x: {
        toJSON: () => {
          throw new Error('no');
        },
      },
    };
    expect(redact(bad)).toEqual({ s: { v: 2 }, x: '[Unserializable]' });
    expect(redact({ again: shared })).toEqual({ again: { v: 2 } });
  });
});
