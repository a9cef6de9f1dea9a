// The agentd dashboard: a Preact single-page app on the public HTTP API (src/ui/api.ts).
import { render, type ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { UnreachableError, api, connection, probeAccess, session, type Access } from './api.js';
import { link, navigate, usePoll, useRoute } from './router.js';
import { RunsPage } from './runs.js';
import { RunPage } from './run.js';
import { ApprovalsPage } from './approvals.js';
import { BackgroundPage, TaskRunsPage } from './background.js';
import { MachinesPage } from './machines.js';
import { ComparePage } from './debug.js';
import { EvalPage, EvalsPage } from './evals.js';
import { FlowPage } from './flow.js';
import './styles.css';

function SignIn({ onDone, error }: { onDone: () => void; error: string | null }) {
  const [key, setKey] = useState('');
  return (
    <form
      class="card signin"
      onSubmit={(e) => {
        e.preventDefault();
        session.setKey(key.trim());
        onDone();
      }}
    >
      <h2>Sign in</h2>
      <p>This agentd needs an API key. It is kept in this tab only (sessionStorage).</p>
      <input name="api-key" type="password" placeholder="API key" value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} autofocus />
      <button type="submit">Sign in</button>
      {error && <p class="error">{error}</p>}
    </form>
  );
}

/** Shown while requests fail without an answer: the service is down, not the page. */
function Offline() {
  const [up, setUp] = useState(connection.reachable());
  useEffect(() => connection.subscribe(setUp), []);
  if (up) return null;
  return (
    <div class="banner b-failed offline" id="offline" role="alert">
      <strong>Cannot reach the agentd service</strong> at {location.origin}: it may be stopped or restarting. The page keeps trying and picks up where it was
      once the service answers.
    </div>
  );
}

/**
 * How many runs wait for a person (an approval or a budget decision), polled: two list reads of
 * one item each, whose `total` is the count (one indexed filter, so exact; docs/contract.md §1.1).
 */
function PendingCount() {
  const [n, setN] = useState<number | null>(null);
  usePoll(async () => {
    try {
      const [a, b] = await Promise.all([api('/runs?status=awaiting_approval&limit=1'), api('/runs?status=awaiting_budget&limit=1')]);
      setN(a.total + b.total);
    } catch {
      setN(null);
    }
  }, 3000);
  if (!n) return null;
  return (
    <span class="pending-count" title="runs waiting for a decision">
      {n}
    </span>
  );
}

function App() {
  const route = useRoute();
  const [access, setAccess] = useState<Access | null>(null);
  const [error, setError] = useState<string | null>(null);
  const check = () => {
    probeAccess().then(
      (a) => {
        if (a.needsKey && session.key()) {
          setError('That key was refused.');
          session.setKey('');
        }
        setAccess(a);
      },
      (e) => {
        setError(String(e));
        // The service did not answer: try again until it does.
        if (e instanceof UnreachableError) setTimeout(check, 2000);
      },
    );
  };
  useEffect(check, []);
  if (!access)
    return (
      <>
        <Offline />
        {connection.reachable() && <p class="muted">{error ?? 'Connecting…'}</p>}
      </>
    );
  if (access.needsKey)
    return (
      <SignIn
        onDone={() => {
          setError(null);
          setAccess(null);
          check();
        }}
        error={error}
      />
    );
  const page = route.parts[0] ?? 'runs';
  let body;
  if (page === 'runs' && route.parts[1]) body = <RunPage runId={route.parts[1]} access={access} />;
  else if (page === 'approvals') body = <ApprovalsPage access={access} />;
  else if (page === 'background' && route.parts[1] === 'tasks' && route.parts[2]) body = <TaskRunsPage taskId={route.parts[2]} access={access} />;
  else if (page === 'background') body = <BackgroundPage access={access} />;
  else if (page === 'machines') body = <MachinesPage query={route.query} />;
  else if (page === 'evals' && route.parts[1]) body = <EvalPage evalId={route.parts[1]} access={access} />;
  else if (page === 'evals') body = <EvalsPage access={access} />;
  else if (page === 'compare' && route.parts[1] && route.parts[2]) body = <ComparePage a={route.parts[1]} b={route.parts[2]} />;
  else if (page === 'flow') body = <FlowPage />;
  else body = <RunsPage access={access} />;
  const tab = (name: string, label: string, extra?: ComponentChildren) => (
    <a href={`/ui/${name}`} class={page === name ? 'active' : ''} onClick={link}>
      {label}
      {extra}
    </a>
  );
  return (
    <>
      <header>
        <strong>agentd</strong>
        <nav>
          {tab('runs', 'Runs')}
          {tab('approvals', 'Approvals', <PendingCount />)}
          {tab('background', 'Background')}
          {tab('evals', 'Evals')}
          {tab('flow', 'Flow')}
          {tab('machines', 'Machines')}
        </nav>
        {access.name && (
          <span class="who" title="the API key this tab is signed in with">
            signed in as <strong class="key-name">{access.name}</strong>
          </span>
        )}
        {access.tenant && (
          <span class="tenant" title="this key sees and decides only its tenant's runs (docs/multi-tenant.md)">
            tenant: <strong>{access.tenant}</strong>
          </span>
        )}
        <span class="role" data-role={access.role}>
          role: {access.role}
        </span>
        {session.key() && (
          <button
            class="link"
            onClick={() => {
              session.setKey('');
              setAccess(null);
              check();
              navigate('/ui/runs');
            }}
          >
            sign out
          </button>
        )}
      </header>
      <Offline />
      <main>{body}</main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
