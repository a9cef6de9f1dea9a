// `agentd runs checkpoints|fork|replay|compare` and `agentd evals create|show|ls` (docs/debugging.md).
import type { Schemas } from '../client/index.js';
import { EXIT, intFlag, jsonObjectFlag, type CommandSpec, type Parsed } from './args.js';
import { brief, out, printJson, remoteOf, status, table, usd } from './remote.js';

const helpOf = (spec: CommandSpec) => `agentd ${spec.path.join(' ')}`;
const str = (v: string | boolean | undefined): string | undefined => (typeof v === 'string' ? v : undefined);

/** `--model JSON`, `--agent ID`, `--system TEXT`: a replay's variant. */
function variantOf(p: Parsed, spec: CommandSpec): Record<string, unknown> {
  const model = jsonObjectFlag(p.values.model, 'model', helpOf(spec));
  const variant = {
    ...(str(p.values.agent) ? { agent_id: str(p.values.agent) } : {}),
    ...(model ? { model } : {}),
    ...(str(p.values.system) !== undefined ? { system_instruction: str(p.values.system) } : {}),
  };
  return variant;
}

export async function runsCheckpoints(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const [runId, checkpointId] = p.positionals;
  if (checkpointId) {
    const cp = await remote.client.call('getRunCheckpoint', { path: { run_id: runId, checkpoint_id: checkpointId } });
    if (remote.json) printJson(cp);
    else {
      status(`${cp.checkpoint_id} of run ${runId}: step ${cp.step}, ${cp.state}, ${cp.message_count} messages`);
      for (const m of cp.messages) out(`${m.role.padEnd(9)} ${m.tool_calls?.length ? `calls ${brief(m.tool_calls, 100)}` : brief(m.content, 100)}`);
    }
    return EXIT.ok;
  }
  const list = await remote.client.call('listRunCheckpoints', { path: { run_id: runId } });
  if (remote.json) printJson(list);
  else
    out(
      table(
        ['CHECKPOINT', 'STEP', 'STATE', 'MESSAGES', 'TOKENS', 'COST', 'PENDING', 'AT'],
        list.checkpoints.map((c) => [
          c.checkpoint_id,
          c.step,
          c.state,
          c.message_count,
          c.usage.total_tokens,
          usd(c.usage.estimated_cost_usd),
          [...c.pending.approvals, ...(c.pending.budget_request ? [c.pending.budget_request] : [])].join(' '),
          c.created_at,
        ]),
      ),
    );
  return EXIT.ok;
}

function printResult(r: { status: string; run_id: string | null; response: string | null; session_id: string }, json: boolean, what: string): number {
  if (json) printJson(r);
  else {
    if (r.response !== null) out(r.response);
    status(`[${r.status}] ${what} run ${r.run_id ?? '?'} · session ${r.session_id}`);
  }
  return r.status === 'success' ? EXIT.ok : r.status.startsWith('awaiting') || r.status === 'interrupted' ? EXIT.waiting : EXIT.error;
}

export async function runsFork(p: Parsed, spec: CommandSpec): Promise<number> {
  const remote = remoteOf(p);
  const [runId, checkpointId] = p.positionals;
  const toolResults = jsonObjectFlag(p.values['tool-results'], 'tool-results', helpOf(spec)) as Record<string, string> | undefined;
  const edits = {
    ...(str(p.values.message) ? { user_message: str(p.values.message) } : {}),
    ...(toolResults ? { tool_results: toolResults } : {}),
  };
  const r = await remote.client.call('forkRun', {
    path: { run_id: runId },
    body: {
      checkpoint_id: checkpointId,
      ...(Object.keys(edits).length ? { edits } : {}),
      ...(str(p.values.session) ? { session_id: str(p.values.session) } : {}),
    },
  });
  return printResult(r, remote.json, `fork of ${runId} at ${checkpointId}:`);
}

export async function runsReplay(p: Parsed, spec: CommandSpec): Promise<number> {
  const remote = remoteOf(p);
  const [runId] = p.positionals;
  const tools = str(p.values.tools) as 'recorded' | 'live' | undefined;
  const r = await remote.client.call('replayRun', {
    path: { run_id: runId },
    body: { variant: variantOf(p, spec), ...(tools ? { tools } : {}), ...(str(p.values.from) ? { from_checkpoint: str(p.values.from) } : {}) },
  });
  return printResult(r, remote.json, `replay of ${runId}:`);
}

export async function runsCompare(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const [a, b] = p.positionals;
  const c = await remote.client.call('compareRuns', { path: { a, b } });
  if (remote.json) {
    printJson(c);
    return EXIT.ok;
  }
  const d = c.diff;
  out(
    table(
      ['', 'STATUS', 'STEPS', 'TOKENS', 'COST', 'MS', 'TOOL CALLS'],
      [
        [c.a.run_id, c.a.status, c.a.steps, c.a.tokens, usd(c.a.cost_usd), c.a.duration_ms, c.a.tool_calls.length],
        [c.b.run_id, c.b.status, c.b.steps, c.b.tokens, usd(c.b.cost_usd), c.b.duration_ms, c.b.tool_calls.length],
      ],
    ),
  );
  out(`tool calls: +${d.tool_calls.added.length} -${d.tool_calls.removed.length} ~${d.tool_calls.changed.length}`);
  out(d.response_changed ? d.response_diff : 'same answer');
  return EXIT.ok;
}

export async function evalsCreate(p: Parsed, spec: CommandSpec): Promise<number> {
  const remote = remoteOf(p);
  const [name] = p.positionals;
  const runIds = str(p.values.runs)?.split(',').filter(Boolean);
  const filter = jsonObjectFlag(p.values.filter, 'filter', helpOf(spec));
  const scorer = jsonObjectFlag(p.values.scorer, 'scorer', helpOf(spec));
  const concurrency = intFlag(p.values.concurrency, 'concurrency', helpOf(spec));
  const tools = str(p.values.tools) as 'recorded' | 'live' | undefined;
  const e = (await remote.client.call('createEval', {
    body: {
      name,
      source: (runIds ? { run_ids: runIds } : { filter: { limit: 100, ...(filter ?? {}) } }) as never,
      variant: variantOf(p, spec),
      ...(tools ? { tools } : {}),
      ...(concurrency ? { concurrency } : {}),
      ...(scorer ? { scorer: scorer as never } : {}),
    },
  })) as Schemas['Eval'];
  if (remote.json) printJson(e);
  else out(`eval ${e.eval_id} (${e.name}): ${e.status}, ${e.progress.total} runs (follow it: agentd evals show ${e.eval_id})`);
  return EXIT.ok;
}

export async function evalsShow(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const e = await remote.client.call('getEval', { path: { eval_id: p.positionals[0] } });
  if (remote.json) {
    printJson(e);
    return EXIT.ok;
  }
  const a = e.aggregates;
  status(`eval ${e.eval_id} (${e.name}): ${e.status}, ${e.progress.done}/${e.progress.total} done, ${e.progress.failed} failed`);
  status(
    `changed ${a.changed_pct.toFixed(1)} %, mean score ${a.mean_score === null ? '-' : a.mean_score.toFixed(3)}, tokens ${a.token_delta >= 0 ? '+' : ''}${a.token_delta}, cost ${usd(a.cost_delta_usd)}`,
  );
  out(
    table(
      ['RUN', 'REPLAY', 'STATUS', 'CHANGED', 'SCORE', 'TOKENS', 'OUTCOMES'],
      e.items.map((i) => [
        i.run_id,
        i.replay_run_id,
        i.status,
        i.changed === null ? '' : i.changed ? 'yes' : 'no',
        i.score,
        i.token_delta,
        i.original_outcomes.map((o) => o.label).join(' '),
      ]),
    ),
  );
  return EXIT.ok;
}

export async function evalsLs(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const list = await remote.client.call('listEvals', { query: {} });
  if (remote.json) printJson(list);
  else
    out(
      table(
        ['EVAL', 'NAME', 'STATUS', 'DONE', 'FAILED', 'TOTAL', 'CREATED'],
        list.evals.map((e) => [e.eval_id, e.name, e.status, e.progress.done, e.progress.failed, e.progress.total, e.created_at]),
      ),
    );
  return EXIT.ok;
}
