// Tool policies as code through HTTP (docs/policies.md): CEL conditions decide a run's tool calls,
// a rule's approvers restrict who decides (403 AGT_ERR_APPROVER_NOT_ALLOWED; a global admin
// overrides, recorded), a condition that fails denies (fail closed), the policy events carry the
// rule id and the inputs' digest, POST /governance/evaluate answers without running anything, and
// an invalid condition refuses to start.
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { writeFileSync, readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const KEYS = [
  { name: 'finance-alice', role: 'approver', key_sha256: sha('k-alice') },
  { name: 'ops-bob', role: 'approver', key_sha256: sha('k-bob') },
  { name: 'root', role: 'admin', key_sha256: sha('k-root') },
  { name: 'acme-admin', role: 'admin', tenant: 'acme', key_sha256: sha('k-acme-admin') },
  { name: 'op', role: 'operator', key_sha256: sha('k-op') },
  { name: 'reader', role: 'reader', key_sha256: sha('k-reader') },
];
const bearer = (k: string) => ({ authorization: `Bearer ${k}` });
const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
const RULES = [
  // The run request's metadata (absent: {}), so `has` keeps runs without it out of this rule.
  {
    id: 'public-channel',
    tools: ['ledger_append'],
    effect: 'deny',
    condition: 'has(metadata.channel) && metadata.channel == "public"',
    reason: 'public channel',
  },
  { id: 'big-entries', tools: ['ledger_append'], effect: 'ask', condition: 'args.entry.startsWith("big")', approvers: ['finance-*'], reason: 'big entry' },
  { id: 'needs-amount', tools: ['ledger_append'], effect: 'allow', condition: 'args.amount > 1' },
];
const CONFIG = { auth: { api_keys: KEYS }, agent: { tools: { local: TOOLS, builtin: [] } }, governance: { rules: RULES } };

let model: ScriptedOpenAI;
let s: TestServer;
let ledger: string;
beforeAll(async () => {
  model = await startScriptedOpenAI();
  ledger = join(tempDir(), 'ledger.jsonl');
  writeFileSync(ledger, '');
  process.env.AGENTD_TEST_LEDGER = ledger;
  model.setDefault((req) => (req.messages.at(-1)?.role === 'tool' ? { text: `saw: ${String(req.messages.at(-1)?.content)}` } : { text: 'plain' }));
  s = await startTestServer(CONFIG, { modelUrl: model.url });
}, 60_000);
afterAll(async () => {
  await s?.stop();
  s?.cleanup();
  await model?.close();
});

/** The run once it ended (a decided run resumes in the background). */
const settled = (run: string) =>
  eventually(async () => {
    const v = (await getJson(`${s.url}/runs/${run}`, bearer('k-reader'))).body;
    return ['completed', 'failed', 'blocked', 'cancelled'].includes(v.status) ? v : null;
  });

const pausedRun = async (entry: string) => {
  model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry } }] });
  const r = await postJson(`${s.url}/run/sync`, { query: entry }, bearer('k-op'));
  expect(r.body.status).toBe('awaiting_approval');
  return { run: r.body.run_id as string, approval: r.body.approvals[0] as { approval_id: string; rule_id: string; approvers: string[] } };
};

describe('approvers', () => {
  it('refuses an approver key the rule does not name, with 403 AGT_ERR_APPROVER_NOT_ALLOWED', async () => {
    const { run, approval } = await pausedRun('big payment');
    expect(approval).toMatchObject({ rule_id: 'big-entries', approvers: ['finance-*'] });
    const bob = await postJson(`${s.url}/runs/${run}/approvals/${approval.approval_id}`, { decision: 'approve', approver: 'ops-bob' }, bearer('k-bob'));
    expect(bob.status).toBe(403);
    expect(bob.body.code).toBe('AGT_ERR_APPROVER_NOT_ALLOWED');
    const alice = await postJson(
      `${s.url}/runs/${run}/approvals/${approval.approval_id}`,
      { decision: 'approve', approver: 'finance-alice' },
      bearer('k-alice'),
    );
    expect(alice.status).toBe(200);
    expect(alice.body.override).toBeUndefined();
    await settled(run); // its resumed model call must not take a reply the next test enqueues
  });

  it('lets a global admin decide anyway, recorded as an override; a tenant admin is not global', async () => {
    const { run, approval } = await pausedRun('big refund');
    const root = await postJson(`${s.url}/runs/${run}/approvals/${approval.approval_id}`, { decision: 'deny', approver: 'root' }, bearer('k-root'));
    expect(root.status).toBe(200);
    expect(root.body).toMatchObject({ status: 'denied', override: true });
    const view = await settled(run);
    expect(view.approvals[0]).toMatchObject({ override: true, approver: 'root' });
  });
});

describe('fail closed and the policy events', () => {
  it('denies a call whose condition fails to evaluate, with the error, rule id and inputs digest in the events', async () => {
    // `entry` does not start with "big": the next rule's condition reads args.amount, which is missing.
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'small' } }] });
    const r = await postJson(`${s.url}/run/sync`, { query: 'small' }, bearer('k-op'));
    expect(r.body.status).toBe('success');
    expect(readFileSync(ledger, 'utf8')).not.toContain('small');
    const ev = await getJson(`${s.url}/telemetry/events?run_id=${r.body.run_id}&event_type=policy_decision_deny`, bearer('k-reader'));
    expect(ev.body.events).toHaveLength(1);
    const deny = ev.body.events[0];
    expect(deny.output).toMatchObject({ effect: 'deny', rule_id: 'needs-amount', error: expect.stringContaining('amount') });
    expect(deny.metadata).toMatchObject({ rule_id: 'needs-amount', inputs_sha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
    const req = await getJson(`${s.url}/telemetry/events?run_id=${r.body.run_id}&event_type=policy_request_created`, bearer('k-reader'));
    expect(req.body.events).toHaveLength(1);
  });
});

describe('POST /governance/evaluate', () => {
  const evaluate = (body: unknown, key = 'k-op') => postJson(`${s.url}/governance/evaluate`, body, bearer(key));

  it('answers what the rules decide, without running anything', async () => {
    const before = (await getJson(`${s.url}/runs`, bearer('k-reader'))).body.total;
    const ask = await evaluate({ tool: 'ledger_append', args: { entry: 'big one' } });
    expect(ask.status).toBe(200);
    expect(ask.body).toMatchObject({ effect: 'ask', rule_id: 'big-entries', reason: 'big entry', approvers: ['finance-*'] });
    expect(ask.body.inputs_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect((await evaluate({ tool: 'ledger_append', args: { entry: 'x', amount: 5 } })).body).toMatchObject({ effect: 'allow', rule_id: 'needs-amount' });
    const failed = await evaluate({ tool: 'ledger_append', args: { entry: 'x' } });
    expect(failed.body).toMatchObject({ effect: 'deny', rule_id: 'needs-amount', error: expect.stringContaining('amount') });
    expect((await evaluate({ tool: 'other' })).body).toMatchObject({ effect: 'allow', rule_id: null });
    expect((await getJson(`${s.url}/runs`, bearer('k-reader'))).body.total).toBe(before);
  });

  it('is for operators; refuses bad input with 422 and another tenant with 403', async () => {
    expect((await evaluate({ tool: 'x' }, 'k-reader')).status).toBe(403);
    const bad = await evaluate({ args: {} });
    expect(bad.status).toBe(422);
    expect(bad.body.detail[0].loc).toEqual(['body', 'tool']);
    expect((await evaluate({ tool: 'x', tenant: 'beta' }, 'k-acme-admin')).body.code).toBe('AGT_ERR_TENANT_MISMATCH');
    expect((await evaluate({ tool: 'x' }, 'k-acme-admin')).status).toBe(200);
  });
});

describe('start-up', () => {
  it('refuses a rule whose condition does not parse, naming the rule id and the parse error', async () => {
    const bad = { governance: { rules: [{ id: 'broken-rule', tools: ['*'], effect: 'deny', condition: 'args.amount >' }] } };
    await expect(startTestServer(bad)).rejects.toThrow(/broken-rule: condition does not parse: .*Unexpected token/);
  });
});

describe("metadata in conditions is the run request's", () => {
  const decisionOf = async (run: string) => {
    const ev = await getJson(`${s.url}/telemetry/events?run_id=${run}`, bearer('k-reader'));
    return ev.body.events.find((e: { event_type: string }) => e.event_type.startsWith('policy_decision_'));
  };

  it('decides by the metadata of the request, stored on the run', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'small', amount: 5 } }] });
    const pub = await postJson(`${s.url}/run/sync`, { query: 'from public', metadata: { channel: 'public' } }, bearer('k-op'));
    expect(pub.status).toBe(200);
    const denied = await decisionOf(pub.body.run_id);
    expect(denied).toMatchObject({ event_type: 'policy_decision_deny', metadata: { rule_id: 'public-channel' } });
    expect((await getJson(`${s.url}/runs/${pub.body.run_id}`, bearer('k-reader'))).body.metadata).toEqual({ channel: 'public' });
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'small', amount: 5 } }] });
    const internal = await postJson(`${s.url}/run/sync`, { query: 'from inside', metadata: { channel: 'internal' } }, bearer('k-op'));
    expect(await decisionOf(internal.body.run_id)).toMatchObject({ event_type: 'policy_decision_allow', metadata: { rule_id: 'needs-amount' } });
  });

  it('refuses metadata that is not an object, or over 16 KiB', async () => {
    expect((await postJson(`${s.url}/run/sync`, { query: 'x', metadata: 'public' }, bearer('k-op'))).status).toBe(422);
    expect((await postJson(`${s.url}/run/sync`, { query: 'x', metadata: { big: 'x'.repeat(17_000) } }, bearer('k-op'))).status).toBe(422);
  });
});

describe('the approvals inbox shows a key the decisions it may take', () => {
  it("marks each pending approval with may_decide for the asking key (the rule's approvers, a global admin always)", async () => {
    const { run, approval } = await pausedRun('big inbox entry');
    const mayDecide = async (key: string) => {
      const list = await getJson(`${s.url}/runs?status=awaiting_approval&limit=500`, bearer(key));
      const listed = list.body.runs
        .find((r: { run_id: string }) => r.run_id === run)
        .approvals.find((a: { approval_id: string }) => a.approval_id === approval.approval_id);
      const one = (await getJson(`${s.url}/runs/${run}`, bearer(key))).body.approvals.find(
        (a: { approval_id: string }) => a.approval_id === approval.approval_id,
      );
      expect(one.may_decide, key).toBe(listed.may_decide);
      return listed.may_decide;
    };
    expect(await mayDecide('k-alice')).toBe(true); // finance-* names her
    expect(await mayDecide('k-bob')).toBe(false); // an approver the rule does not name
    expect(await mayDecide('k-root')).toBe(true); // a global admin overrides
    expect(await mayDecide('k-reader')).toBe(false); // no deciding role
    // What it says is what a decision gets: bob is refused.
    const refused = await postJson(`${s.url}/runs/${run}/approvals/${approval.approval_id}`, { decision: 'approve', approver: 'ops-bob' }, bearer('k-bob'));
    expect(refused.status).toBe(403);
  });

  it('MCP list_pending_approvals (the official MCP client) lists a deciding key only what it may decide; a reader sees all, marked', async () => {
    const { run, approval } = await pausedRun('big mcp entry');
    const listed = async (key: string) => {
      const client = new Client({ name: 'agentd-test', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${s.url}/mcp`), { requestInit: { headers: bearer(key) } }));
      try {
        const res = await client.callTool({ name: 'list_pending_approvals', arguments: {} });
        const { approvals } = res.structuredContent as { approvals: Array<{ run_id: string; approval_id: string; may_decide: boolean }> };
        return approvals.find((a) => a.run_id === run && a.approval_id === approval.approval_id) ?? null;
      } finally {
        await client.close();
      }
    };
    expect(await listed('k-alice')).toMatchObject({ may_decide: true }); // finance-* names her
    expect(await listed('k-bob')).toBeNull(); // an approver the rule does not name: not in his inbox
    expect(await listed('k-root')).toMatchObject({ may_decide: true }); // a global admin overrides
    expect(await listed('k-reader')).toMatchObject({ may_decide: false }); // reads everything, decides nothing
  });
});
