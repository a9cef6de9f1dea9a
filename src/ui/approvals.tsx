// Approvals inbox: every pending approval and budget request across runs, polled every 2 s.
import { useEffect, useState } from 'preact/hooks';
import { api, schemaProblems, session, type Access } from './api.js';
import { link, usePoll } from './router.js';

export function ApprovalCard({ run, approval, tools, access, onDone }: { run: any; approval: any; tools: any[]; access: Access; onDone?: () => void }) {
  const [args, setArgs] = useState(JSON.stringify(approval.arguments ?? {}, null, 2));
  const [note, setNote] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  // The decision as the server recorded it: after an edited approval the run uses its
  // edited_arguments, so that is what the card shows from then on.
  const [decided, setDecided] = useState<any>(null);
  const tool = tools.find((t) => t.name === approval.tool_name);
  const decide = async (decision: 'approve' | 'deny') => {
    setError(null);
    const body: Record<string, unknown> = { decision, approver: session.approver() };
    if (note.trim()) body.note = note.trim();
    if (decision === 'approve') {
      let parsed: unknown;
      try {
        parsed = JSON.parse(args);
      } catch {
        return setError('The arguments are not valid JSON.');
      }
      const problems = tool ? schemaProblems(parsed, tool.input_schema) : [];
      if (problems.length) return setError(`The arguments do not fit the tool's schema: ${problems.join('; ')}`);
      if (JSON.stringify(parsed) !== JSON.stringify(approval.arguments ?? {})) body.arguments = parsed;
    }
    try {
      setDecided(await api(`/runs/${run.run_id}/approvals/${approval.approval_id}`, { method: 'POST', body }));
      setDone(decision === 'approve' ? 'approved' : 'denied');
      onDone?.();
    } catch (e) {
      setError(String(e));
    }
  };
  return (
    <div class="card approval" data-approval={approval.approval_id}>
      <h3>
        Approval: <span class="mono tool">{approval.tool_name}</span>{' '}
        <span class="muted">
          run{' '}
          <a href={`/ui/runs/${run.run_id}`} onClick={link} class="mono">
            {run.run_id}
          </a>
        </span>
      </h3>
      {run.query_preview && (
        <p class="request">
          Request: <q>{run.query_preview}</q>
        </p>
      )}
      <p>
        Reason: <span class="reason">{approval.reason ?? '–'}</span> · asked {new Date(approval.created_at).toLocaleString()}
        {approval.expires_at ? ` · expires ${new Date(approval.expires_at).toLocaleString()}` : ''}
      </p>
      {access.canDecide && !done ? (
        <>
          <label>Arguments (JSON; edit to approve a changed call)</label>
          <textarea
            name="arguments"
            rows={Math.min(12, args.split('\n').length + 1)}
            value={args}
            onInput={(e) => setArgs((e.target as HTMLTextAreaElement).value)}
          />
          <div class="row">
            <input name="note" placeholder="note (reaches the model on deny)" value={note} onInput={(e) => setNote((e.target as HTMLInputElement).value)} />
            <button class="approve" onClick={() => decide('approve')}>
              Approve
            </button>
            <button class="danger deny" onClick={() => decide('deny')}>
              Deny
            </button>
          </div>
        </>
      ) : (decided ?? approval).edited_arguments ? (
        <>
          <label class="edited-label">Edited arguments (the run uses these)</label>
          <pre class="arguments edited">{JSON.stringify((decided ?? approval).edited_arguments, null, 2)}</pre>
          <details>
            <summary class="muted">as the model asked</summary>
            <pre>{JSON.stringify(approval.arguments ?? {}, null, 2)}</pre>
          </details>
        </>
      ) : (
        <pre class="arguments">{JSON.stringify(approval.arguments ?? {}, null, 2)}</pre>
      )}
      {done && <p class="ok">{done}</p>}
      {error && <p class="error">{error}</p>}
    </div>
  );
}

export function BudgetCard({ run, request, access, onDone }: { run: any; request: any; access: Access; onDone?: () => void }) {
  const [amount, setAmount] = useState(String(request.shortfall ?? ''));
  const [note, setNote] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const decide = async (decision: 'grant' | 'deny') => {
    const body: Record<string, unknown> = { decision, approver: session.approver() };
    if (decision === 'grant' && amount.trim()) {
      const n = Number(amount);
      if (!(n > 0)) return setError('The amount must be a positive number.');
      body.amount = n;
    }
    if (note.trim()) body.note = note.trim();
    try {
      await api(`/runs/${run.run_id}/budget`, { method: 'POST', body });
      setDone(decision === 'grant' ? 'granted' : 'denied');
      onDone?.();
    } catch (e) {
      setError(String(e));
    }
  };
  return (
    <div class="card budget">
      <h3>
        Budget: {request.scope} {request.meter}{' '}
        <span class="muted">
          run{' '}
          <a href={`/ui/runs/${run.run_id}`} onClick={link} class="mono">
            {run.run_id}
          </a>
        </span>
      </h3>
      {run.query_preview && (
        <p class="request">
          Request: <q>{run.query_preview}</q>
        </p>
      )}
      <p>
        used {request.used} of {request.limit}, needs {request.needed} (short {request.shortfall})
      </p>
      {access.canDecide && !done && (
        <div class="row">
          <input name="amount" value={amount} onInput={(e) => setAmount((e.target as HTMLInputElement).value)} />
          <input name="note" placeholder="note" value={note} onInput={(e) => setNote((e.target as HTMLInputElement).value)} />
          <button class="approve" onClick={() => decide('grant')}>
            Grant
          </button>
          <button class="danger" onClick={() => decide('deny')}>
            Deny
          </button>
        </div>
      )}
      {done && <p class="ok">{done}</p>}
      {error && <p class="error">{error}</p>}
    </div>
  );
}

export function ApprovalsPage({ access }: { access: Access }) {
  const [runs, setRuns] = useState<any[] | null>(null);
  const [tools, setTools] = useState<any[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [approver, setApprover] = useState(session.approver());
  useEffect(() => {
    api('/tools').then(
      (t) => setTools(t.tools),
      () => undefined,
    );
  }, []);
  // The list answers each run's approvals and budget requests already: one request per status.
  usePoll(async () => {
    try {
      const [a, b] = await Promise.all([api('/runs?status=awaiting_approval&limit=500'), api('/runs?status=awaiting_budget&limit=500')]);
      setRuns([...a.runs, ...b.runs]);
      setError(null);
    } catch (e) {
      setError(String(e));
    }
  }, 2000);
  const items: any[] = [];
  for (const r of runs ?? []) {
    for (const a of r.approvals ?? [])
      // A key that decides sees only what it may decide (the rule's approvers: GET /runs' may_decide); a reader sees all, read-only.
      if (a.status === 'pending' && (!access.canDecide || a.may_decide !== false))
        items.push(<ApprovalCard key={a.approval_id} run={r} approval={a} tools={tools} access={access} />);
    for (const b of r.budget_requests ?? []) if (b.status === 'pending') items.push(<BudgetCard key={b.request_id} run={r} request={b} access={access} />);
  }
  return (
    <>
      <div class="card row">
        <h3>Pending decisions ({items.length})</h3>
        {access.canDecide && (
          <label>
            deciding as{' '}
            <input
              name="approver"
              value={approver}
              onInput={(e) => {
                const v = (e.target as HTMLInputElement).value;
                setApprover(v);
                // Empty: back to the key's name.
                session.setApprover(v);
              }}
            />
          </label>
        )}
      </div>
      {error && <p class="error">{error}</p>}
      {runs && items.length === 0 && (
        <p class="muted" id="inbox-empty">
          Nothing waits for a decision.
        </p>
      )}
      {items}
    </>
  );
}
