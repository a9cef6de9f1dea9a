// A background run's agent run starts before its claim is stored (docs/background.md "Starting
// before the claim lands") and writes nothing until it is: not its record, and not a budget hold
// either. A hold written before a claim that is then refused was never settled when the run was
// not taken up again (cancel_previous cancelled it): the agent's budget stayed reserved for good
// (seen in test/cluster/two-instances "never overspend", which waits for no held budget).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { StoreError, type CommitOps, type WriteOp } from '../../src/store/store.js';
import { RecordWriter } from '../../src/runtime/persistence.js';
import { TOOLS, api, directModel, waitRun, type Api } from './helpers.js';
import { waitFor } from '../helpers/wait.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  server = await startTestServer(
    {
      agent: { tools: { local: TOOLS } },
      background: { poll_interval_ms: 50, concurrency: 1 },
      budgets: { agent: [{ meter: 'tool_calls', limit: 100, on_exhausted: 'terminate' }] },
    },
    { modelUrl: model.url },
  );
  a = api(server.url);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

const opsOf = (ops: CommitOps): WriteOp[] => (Array.isArray(ops) ? ops : []);

describe('a claim refused after its agent run started', () => {
  it('leaves no budget hold: the tool call waits for the claim before it reserves', async () => {
    const store = server.store;
    if (!store.capabilities.sharedByInstances) return; // the embedded stores start early without a gate (AgentBridge.abandon)
    let reserved = false;
    let gateAsked = false;
    let reservedBeforeRefusal: boolean | null = null;
    const { commit, commitWithEvents } = store;
    const mayWrite = RecordWriter.prototype.mayWrite;
    RecordWriter.prototype.mayWrite = function (this: RecordWriter<unknown>) {
      gateAsked = true;
      return mayWrite.call(this);
    };
    store.commit = (ops) => {
      if (opsOf(ops).some((o) => o.kind === 'budget_ledger')) reserved = true;
      return commit.call(store, ops);
    };
    let refuse = true;
    store.commitWithEvents = (ops, events) => {
      const claim = opsOf(ops).some((o) => {
        const run = (o as { value?: { run?: { status?: string; task_id?: string } } }).value?.run;
        return o.kind === 'bg_runs' && run?.status === 'running' && run.task_id === 'refused-budget';
      });
      if (claim && refuse) {
        refuse = false;
        // Refused as if another instance had claimed the row first, once the agent run it started
        // reached its tool call's reservation: written (the bug) or waiting for this claim.
        return waitFor(() => reserved || gateAsked, { what: "the agent run's tool reservation" }).then(() => {
          reservedBeforeRefusal = reserved;
          throw new StoreError('stale_version', 'bg_runs: another instance claimed it first');
        });
      }
      return commitWithEvents.call(store, ops, events);
    };
    let id: string;
    try {
      const t = await a.post('/background/tasks', {
        task_id: 'refused-budget',
        schedule: { type: 'manual' },
        query: 'CALL bg_slow {"ms": 1}',
        session_policy: { mode: 'run' },
      });
      expect(t.status).toBe(200);
      const r = await a.post('/background/tasks/refused-budget/run', {});
      expect(r.status).toBe(200);
      id = r.body.run_id;
      expect((await waitRun(a, id)).status).toBe('completed');
    } finally {
      store.commit = commit;
      store.commitWithEvents = commitWithEvents;
      RecordWriter.prototype.mayWrite = mayWrite;
    }
    expect(reservedBeforeRefusal).toBe(false);
    // The attempt whose claim landed spent its one tool call and holds nothing.
    // The agent run has the background run's id (its row names it before it exists).
    const budget = await a.get(`/runs/${id}/budget`);
    const entry = (budget.body.budgets as Array<{ scope: string; meter: string; spent: number; reserved: number }>).find(
      (b) => b.scope === 'agent' && b.meter === 'tool_calls',
    );
    expect(entry).toMatchObject({ spent: 1, reserved: 0 });
  });
});
