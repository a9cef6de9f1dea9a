// `agentd run`, `runs ls|show|cancel|resume`, `approvals ls|approve|deny`, `budget grant|deny`.
import type { Schemas } from '../client/index.js';
import { EXIT, intFlag, jsonObjectFlag, numberFlag, type CommandSpec, type Parsed } from './args.js';
import { approverOf, brief, out, printJson, remoteOf, shellArg, status, table, usd } from './remote.js';

type RunResponse = Schemas['RunResponse'];
type RunView = Schemas['RunView'];
type Approval = Schemas['Approval'];

const helpOf = (spec: CommandSpec) => `agentd ${spec.path.join(' ')}`;
const str = (v: string | boolean | undefined): string | undefined => (typeof v === 'string' ? v : undefined);

/** What a person needs to decide a waiting run: its pending approvals and the commands. */
function printWaiting(runId: string, approvals: Approval[] | null | undefined, budget: Schemas['BudgetRequest'] | null | undefined): void {
  const pending = (approvals ?? []).filter((a) => a.status === 'pending');
  if (pending.length > 0) {
    status(`waiting for approval: run ${runId}`);
    status(
      table(
        ['APPROVAL', 'TOOL', 'ARGUMENTS', 'REASON'],
        pending.map((a) => [a.approval_id, a.tool_name, brief(a.arguments), a.reason]),
      ).replace(/^/gm, '  '),
    );
    status('decide with:');
    for (const a of pending) {
      status(`  agentd approvals approve ${shellArg(runId)} ${shellArg(a.approval_id)} [--args JSON] [--note TEXT]`);
      status(`  agentd approvals deny ${shellArg(runId)} ${shellArg(a.approval_id)} [--note TEXT]`);
    }
  }
  if (budget && budget.status === 'pending') {
    status(
      `waiting for budget: run ${runId}: ${budget.key} ${budget.meter} needs ${budget.needed}, shortfall ${budget.shortfall} (limit ${budget.limit}, used ${budget.used})`,
    );
    status('decide with:');
    status(`  agentd budget grant ${shellArg(runId)} [--amount X]`);
    status(`  agentd budget deny ${shellArg(runId)} [--note TEXT]`);
  }
}

/** The exit code of a run's result, after its final status line (and what to do when it waits). */
function finish(r: RunResponse, json: boolean): number {
  const runId = r.run_id ?? '?';
  const waiting = r.status === 'awaiting_approval' || r.status === 'awaiting_budget';
  if (!json) {
    const why = r.error ? `: ${r.error.type}: ${r.error.message}` : r.termination_reason && r.termination_reason !== 'stop' ? ` (${r.termination_reason})` : '';
    status(`[${r.status}] run ${runId} · session ${r.session_id}${why}`);
    if (waiting) printWaiting(runId, r.approvals, r.budget_request);
    if (r.status === 'interrupted') status(`continue it with: agentd runs resume ${shellArg(runId)}`);
  }
  // Interrupted is a pause too: nothing failed, and the run goes on when someone resumes it.
  return r.status === 'success' ? EXIT.ok : waiting || r.status === 'interrupted' ? EXIT.waiting : EXIT.error;
}

export async function run(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const [query] = p.positionals;
  const session_id = str(p.values.session);
  const agent_id = str(p.values.agent);
  const session_policy = str(p.values.policy) as 'enqueue' | 'reject' | 'interrupt' | 'rollback' | undefined;
  if (p.values.sync) {
    const r = await remote.client.runs.sync(query, { session_id, agent_id, session_policy });
    if (remote.json) printJson(r);
    else if (r.response !== null) out(r.response);
    return finish(r, remote.json);
  }
  let result: RunResponse | null = null;
  let endedWithNewline = true;
  for await (const f of remote.client.runs.stream(query, { session_id, agent_id, session_policy })) {
    if (remote.json) printJson({ event: f.event, ...(f.id !== undefined ? { id: f.id } : {}), data: f.data });
    if (f.kind === 'complete') result = f.data;
    if (remote.json) continue;
    if (f.kind === 'session') status(`run ${f.data.run_id} · session ${f.data.session_id}`);
    else if (f.kind === 'delta') {
      process.stdout.write(f.data.text);
      if (f.data.text.length > 0) endedWithNewline = f.data.text.endsWith('\n');
    } else if (f.kind === 'event') {
      const line = eventStatus(f.data);
      if (line) {
        // The status goes on its own line even when the answer is mid-line on the same terminal.
        if (!endedWithNewline) {
          process.stdout.write('\n');
          endedWithNewline = true;
        }
        status(line);
      }
    } else if (f.kind === 'error') {
      if (!endedWithNewline) process.stdout.write('\n');
      const resume = f.data.error === 'StreamOverflow' && f.data.run_id ? `; the run goes on: agentd runs show ${f.data.run_id}` : '';
      status(`error: ${f.data.message}${resume}`);
      return EXIT.error;
    }
  }
  if (!remote.json && !endedWithNewline) process.stdout.write('\n');
  if (!result) {
    status('error: the stream ended before the run completed');
    return EXIT.error;
  }
  return finish(result, remote.json);
}

/** The status line of a telemetry event worth showing while a run streams (null: not shown). */
export function eventStatus(e: Schemas['TelemetryEvent']): string | null {
  const toolName = e.metadata?.tool_name;
  const tool = typeof toolName === 'string' ? toolName : (e.actor?.id ?? '?');
  switch (e.event_type) {
    case 'tool_call':
      return `· calling ${tool}`;
    case 'tool_result':
      return e.error ? `· ${tool} failed: ${e.error.message}` : null;
    case 'policy_decision_ask':
      return `· ${tool} needs approval`;
    case 'policy_decision_deny':
      return `· ${tool} denied by policy`;
    case 'budget_warning':
      return '· budget warning';
    case 'budget_exhausted':
      return '· budget exhausted';
    default:
      return null;
  }
}

export async function runsLs(p: Parsed, spec: CommandSpec): Promise<number> {
  const remote = remoteOf(p);
  const limit = intFlag(p.values.limit, 'limit', helpOf(spec));
  const order = p.values.oldest ? 'asc' : 'desc';
  const page = await remote.client.runs.list({
    status: str(p.values.status) as Schemas['RunRecordStatus'] | undefined,
    session_id: str(p.values.session),
    agent_id: str(p.values.agent),
    task_id: str(p.values.task),
    since: str(p.values.since),
    until: str(p.values.until),
    order,
    limit,
    cursor: str(p.values.cursor),
  });
  if (remote.json) {
    printJson(page);
    return EXIT.ok;
  }
  // A TENANT column only when some run has one (a global key's list of several tenants, docs/multi-tenant.md).
  const tenants = page.runs.some((r) => r.tenant);
  out(
    table(
      ['RUN', 'STATUS', 'SESSION', ...(tenants ? ['TENANT'] : []), 'AGENT', 'TASK', 'CREATED', 'DURATION', 'STEPS', 'TOKENS', 'COST'],
      page.runs.map((r) => [
        r.run_id,
        r.status,
        r.session_id,
        ...(tenants ? [r.tenant ?? '-'] : []),
        r.agent_id,
        r.task_id,
        r.created_at,
        durationText(r.created_at, r.ended_at),
        r.step,
        r.usage.request_tokens + r.usage.response_tokens,
        usd(r.usage.estimated_cost_usd),
      ]),
    ),
  );
  // The next page is the same command (same filters and order) with this cursor.
  if (page.next_cursor) status(`more: the same command with --cursor ${shellArg(page.next_cursor)}`);
  return EXIT.ok;
}

/** A run's wall time, created to ended ("-" while it runs or waits): 850ms, 12.3s, 4m05s, 2h03m. */
function durationText(from: string, to: string | null | undefined): string {
  if (!to) return '-';
  const ms = Math.max(0, Date.parse(to) - Date.parse(from));
  if (Number.isNaN(ms)) return '-';
  if (ms < 1000) return `${ms}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export async function runsShow(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const r = await remote.client.runs.get(p.positionals[0]);
  if (remote.json) {
    printJson(r);
    return EXIT.ok;
  }
  printRun(r);
  return EXIT.ok;
}

function printRun(r: RunView): void {
  const rows: [string, unknown][] = [
    ['run', r.run_id],
    ['status', r.status + (r.termination_reason ? ` (${r.termination_reason})` : '')],
    ['session', r.session_id],
    ...(r.tenant ? ([['tenant', r.tenant]] as [string, unknown][]) : []),
    ['agent', r.agent_name],
    ['created', r.created_at],
    ['updated', r.updated_at],
    ['steps', r.step],
    ['attempt', r.attempt],
    ['usage', `${r.usage.requests} model calls, ${r.usage.request_tokens} in / ${r.usage.response_tokens} out tokens, ${usd(r.usage.estimated_cost_usd)}`],
    ['traces', r.trace_ids.join(', ') || '-'],
  ];
  if (r.error) rows.push(['error', `${r.error.type}: ${r.error.message}`]);
  for (const [k, v] of rows) out(`${k.padEnd(9)} ${String(v)}`);
  if (r.tool_calls.length > 0) {
    out('\ntool calls:');
    out(
      table(
        ['TOOL', 'OUTCOME', 'STEP', 'STARTED'],
        r.tool_calls.map((t) => [t.tool_name, t.outcome ?? t.state, t.step, t.started_at]),
      ).replace(/^/gm, '  '),
    );
  }
  if (r.approvals.length > 0) {
    out('\napprovals:');
    out(
      table(
        ['APPROVAL', 'STATUS', 'TOOL', 'APPROVER', 'NOTE'],
        r.approvals.map((a) => [a.approval_id, a.status, a.tool_name, a.approver, a.note]),
      ).replace(/^/gm, '  '),
    );
  }
  if (r.response) out(`\n${r.response}`);
  if (r.status === 'awaiting_approval' || r.status === 'awaiting_budget')
    printWaiting(
      r.run_id,
      r.approvals,
      r.budget_requests.find((b) => b.status === 'pending'),
    );
}

export async function runsCancel(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const r = await remote.client.runs.cancel(p.positionals[0]);
  if (remote.json) printJson(r);
  else out(`run ${r.run_id}: ${r.status.replace('_', ' ')}`);
  return EXIT.ok;
}

export async function runsSteer(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const [runId, message] = p.positionals;
  const r = await remote.client.runs.steer(runId, message, { sender: str(p.values.sender) });
  if (remote.json) printJson(r);
  else out(`run ${r.run_id}: message ${r.message_id} queued (read before its next model call)`);
  return EXIT.ok;
}

export async function runsInterrupt(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const r = await remote.client.runs.interrupt(p.positionals[0]);
  if (remote.json) printJson(r);
  else
    out(
      r.status === 'interrupted'
        ? `run ${r.run_id}: already interrupted (continue it: agentd runs resume ${shellArg(r.run_id)})`
        : `run ${r.run_id}: stops at its next step boundary (continue it later: agentd runs resume ${shellArg(r.run_id)})`,
    );
  return EXIT.ok;
}

export async function runsResume(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const r = await remote.client.runs.resume(p.positionals[0]);
  if (remote.json) printJson(r);
  else if (r.response !== null) out(r.response);
  return finish(r, remote.json);
}

/** Runs awaiting approval, every page of them (bounded: a runaway list is cut with a note). */
const MAX_PAGES = 20;

export async function approvalsLs(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const me = await remote.client.whoami();
  const decides = me.role === 'approver' || me.role === 'admin' || !me.auth;
  const pending: Approval[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const list = await remote.client.runs.list({ status: 'awaiting_approval', limit: 100, cursor });
    // The server marks what this key may decide (the rules' approvers); a key without a deciding role sees all.
    for (const r of list.runs)
      for (const a of r.approvals) if (a.status === 'pending' && (a.may_decide !== false || !decides)) pending.push({ ...a, run_id: r.run_id });
    cursor = list.next_cursor ?? undefined;
    if (!cursor) break;
  }
  if (remote.json) {
    printJson({ approvals: pending, total: pending.length });
    return EXIT.ok;
  }
  if (pending.length === 0) {
    status('no pending approvals');
    return EXIT.ok;
  }
  out(
    table(
      ['RUN', 'APPROVAL', 'TOOL', 'ARGUMENTS', 'EXPIRES', 'REASON'],
      pending.map((a) => [a.run_id, a.approval_id, a.tool_name, brief(a.arguments, 50), a.expires_at, a.reason]),
    ),
  );
  if (cursor) status(`(the first ${MAX_PAGES * 100} waiting runs only)`);
  status('decide with: agentd approvals approve|deny RUN APPROVAL');
  return EXIT.ok;
}

/** `agentd whoami`: the signed-in key's name, role and tenant (none: a global key). */
export async function whoami(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const me = await remote.client.whoami();
  if (remote.json) {
    printJson(me);
    return EXIT.ok;
  }
  out(`${me.name ?? '(auth off)'}  role: ${me.role}  tenant: ${me.tenant ?? '-'}`);
  return EXIT.ok;
}

async function decideApproval(p: Parsed, spec: CommandSpec, decision: 'approve' | 'deny'): Promise<number> {
  const remote = remoteOf(p);
  const [runId, approvalId] = p.positionals;
  const args = decision === 'approve' ? jsonObjectFlag(p.values.args, 'args', helpOf(spec)) : undefined;
  const a = await remote.client.approvals.decide(runId, approvalId, {
    decision,
    approver: await approverOf(p, remote),
    ...(args ? { arguments: args } : {}),
    ...(typeof p.values.note === 'string' ? { note: p.values.note } : {}),
  });
  if (remote.json) printJson(a);
  else
    out(
      `${a.approval_id} of run ${runId}: ${a.status} by ${a.approver ?? '?'}${a.edited_arguments ? ` with ${brief(a.edited_arguments)}` : ''} (the run resumes once all of its approvals are decided: agentd runs show ${shellArg(runId)})`,
    );
  return EXIT.ok;
}

export const approvalsApprove = (p: Parsed, spec: CommandSpec) => decideApproval(p, spec, 'approve');
export const approvalsDeny = (p: Parsed, spec: CommandSpec) => decideApproval(p, spec, 'deny');

async function decideBudget(p: Parsed, spec: CommandSpec, decision: 'grant' | 'deny'): Promise<number> {
  const remote = remoteOf(p);
  const [runId] = p.positionals;
  const amount = decision === 'grant' ? numberFlag(p.values.amount, 'amount', helpOf(spec)) : undefined;
  const r = await remote.client.budget.decide(runId, {
    decision,
    approver: await approverOf(p, remote),
    ...(amount !== undefined ? { amount } : {}),
    ...(typeof p.values.note === 'string' ? { note: p.values.note } : {}),
  });
  if (remote.json) printJson(r);
  else out(`budget ${r.request_id} of run ${runId}: ${r.status}${r.amount !== null ? ` ${r.amount} ${r.meter}` : ''} by ${r.approver}`);
  return EXIT.ok;
}

export const budgetGrant = (p: Parsed, spec: CommandSpec) => decideBudget(p, spec, 'grant');
export const budgetDeny = (p: Parsed, spec: CommandSpec) => decideBudget(p, spec, 'deny');
