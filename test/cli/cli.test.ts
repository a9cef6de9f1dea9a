// The `agentd` CLI, spawned as a child process against real servers (in this process, LevelDB in
// a temp dir, the built-in demo model: it calls a tool named in the query, else answers plainly).
// One governed server for runs, approvals, tasks and events; one with a run budget; one with keys.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { buildCli, cliEnv, collect, freePort, listening, removeCli, runCli, spawnCli, waitForOutput } from './helpers.js';

const GOVERNED = { governance: { rules: [{ tools: ['workspace_write'], effect: 'ask', reason: 'writes files' }] } };
const VERSION = (JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as { version: string }).version;

let server: TestServer;
let env: NodeJS.ProcessEnv;
const cli = (...args: string[]) => runCli(args, env);
const parseLines = (s: string) =>
  s
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, any>);

beforeAll(async () => {
  [server] = await Promise.all([startTestServer(GOVERNED), buildCli()]);
  env = cliEnv({ AGENTD_URL: server.url });
});

afterAll(async () => {
  await server?.stop();
  server?.cleanup();
  removeCli();
});

describe('the command line itself', () => {
  it('-V and --version print the version', async () => {
    const [a, b] = await Promise.all([cli('-V'), cli('--version')]);
    expect(a).toMatchObject({ code: 0, stdout: `${VERSION}\n` });
    expect(b).toMatchObject({ code: 0, stdout: `${VERSION}\n` });
  });

  it('unknown commands and flags are usage errors (exit 2), also for serve, which then never listens', async () => {
    const port = await freePort();
    const results = await Promise.all([
      cli('--bogus'),
      cli('bogus'),
      cli('runs', 'ls', '--bogus'),
      cli('runs', 'frobnicate'),
      cli('serve', '--bogus', '--port', String(port)),
      cli('serve', '--prot', String(port)),
      cli('runs', 'show'),
      cli('approvals', 'approve', 'run_1', 'approval_1', '--args', '[1]'),
      cli('serve', '--demo-delay-ms', 'soon', '--port', String(port)),
    ]);
    for (const r of results) {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/^agentd: .+\nRun 'agentd[a-z ]*--help' for usage\.\n$/);
      expect(r.stdout).toBe('');
    }
    expect(results[2].stderr).toContain("Unknown option '--bogus'");
    expect(results[5].stderr).toContain("Unknown option '--prot'");
    expect(results[6].stderr).toContain('missing RUN');
    expect(results[8].stderr).toContain('--demo-delay-ms');
    expect(await listening(port)).toBe(false);
  });

  it('serve --help prints the help with its flags, exits 0 and starts nothing', async () => {
    const port = await freePort();
    const r = await cli('serve', '--help', '--port', String(port));
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Usage: agentd serve [flags]');
    for (const flag of ['--config FILE', '--host H', '--port N', '--data-dir DIR', '--inspect [URL]']) expect(r.stdout).toContain(flag);
    expect(r.stderr).toBe('');
    expect(await listening(port)).toBe(false);
  });

  it('every command has its own --help, and each group lists its commands', async () => {
    const [run, approve, tasks, top] = await Promise.all([cli('run', '--help'), cli('approvals', 'approve', '-h'), cli('tasks', '--help'), cli('--help')]);
    expect(run.stdout).toContain('Usage: agentd run QUERY [flags]');
    expect(run.stdout).toContain('--session S');
    expect(run.stdout).toContain('--url URL');
    expect(approve.stdout).toContain('--args JSON');
    expect(approve.stdout).toContain('--approver NAME');
    expect(tasks.stdout).toMatch(/tasks preview/);
    expect(top.stdout).toContain('events tail');
    for (const r of [run, approve, tasks, top]) expect(r.code).toBe(0);
  });

  it('says which URL it cannot reach (exit 1)', async () => {
    const port = await freePort();
    const r = await runCli(['runs', 'ls', '--url', `http://127.0.0.1:${port}`], cliEnv());
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`cannot reach agentd at http://127.0.0.1:${port} (ECONNREFUSED)`);
  });

  it('version --help prints the help of version, not the version', async () => {
    const r = await cli('version', '--help');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: agentd version\n/);
    expect(r.stdout).not.toContain(VERSION);
    expect((await cli('version', '--bogus')).code).toBe(2);
  });

  it('a --url or AGENTD_URL that is not an http(s) URL is a usage error (exit 2), not "cannot reach"', async () => {
    const [flag, envUrl] = await Promise.all([runCli(['runs', 'ls', '--url', 'notaurl'], cliEnv()), runCli(['runs', 'ls'], cliEnv({ AGENTD_URL: 'ftp://x' }))]);
    for (const r of [flag, envUrl]) {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/^agentd: .+\nRun 'agentd runs ls --help' for usage\.\n$/);
    }
  });

  it('with --json, errors are one line of JSON on stderr (API errors with their code), exit codes unchanged', async () => {
    const [missing, invalid, usage] = await Promise.all([
      cli('runs', 'show', 'run_nope', '--json'),
      cli('runs', 'ls', '--status', 'bogus', '--json'),
      cli('runs', 'ls', '--json', '--bogus'),
    ]);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stderr)).toMatchObject({ error: { type: 'api', status: 404, body: { code: 'AGT_ERR_RUN_NOT_FOUND' } } });
    expect(invalid.code).toBe(1);
    const bad = JSON.parse(invalid.stderr) as { error: { status: number; body: { detail: { loc: string[] }[] } } };
    expect(bad.error.status).toBe(422);
    expect(bad.error.body.detail[0].loc).toEqual(['query', 'status']);
    expect(usage.code).toBe(2);
    expect(JSON.parse(usage.stderr)).toMatchObject({ error: { type: 'usage', help: 'agentd runs ls --help' } });
    for (const r of [missing, invalid, usage]) expect(r.stdout).toBe('');
  });

  it('prints API errors as error: <message>, and 422 details as loc: msg lines (exit 1)', async () => {
    const [missing, invalid] = await Promise.all([cli('runs', 'show', 'run_nope'), cli('runs', 'ls', '--status', 'bogus')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe("error: run 'run_nope' was not found\n");
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toMatch(/^error: the request is invalid \(HTTP 422\)\n {2}query\.status: /);
  });
});

describe('agentd run', () => {
  it('streams the answer to stdout with a status line on stderr, and exits 0', async () => {
    const r = await cli('run', 'What time is it?', '--session', 'cli-run');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^The clock tool says: /);
    expect(r.stderr).toMatch(/^run run_\S+ · session cli-run\n/);
    expect(r.stderr).toContain('· calling clock');
    expect(r.stderr).toMatch(/\[success\] run run_\S+ · session cli-run/);
    const runs = (await getJson(`${server.url}/runs?session_id=cli-run`)).body;
    expect(runs.runs).toHaveLength(1);
    expect(runs.runs[0].status).toBe('completed');
  });

  it('--json prints every frame as NDJSON, ending with complete', async () => {
    const r = await cli('run', 'hello there', '--json');
    expect(r.code).toBe(0);
    const frames = parseLines(r.stdout);
    expect(frames[0]).toMatchObject({ event: 'session', data: { status: 'started' } });
    expect(frames.at(-1)).toMatchObject({ event: 'complete', data: { status: 'success' } });
    expect(
      frames
        .filter((f) => f.event === 'delta')
        .map((f) => f.data.text)
        .join(''),
    ).toBe(frames.at(-1)!.data.response);
    expect(r.stderr).toBe('');
  });

  it('--sync prints the whole answer', async () => {
    const r = await cli('run', 'hello sync', '--sync');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('hello sync');
  });

  it('--agent runs as a registered agent; an unknown one is an error (exit 1)', async () => {
    const reg = await fetch(`${server.url}/background/agents`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ spec: { agent_id: 'cli-alt', name: 'CLI Alt', agent_config: { builtin_tools: [] } } }),
    });
    expect(reg.status).toBe(200);
    const [sync, streamed, unknown] = await Promise.all([
      cli('run', 'hello alt', '--sync', '--json', '--agent', 'cli-alt'),
      cli('run', 'What time is it?', '--agent', 'cli-alt', '--json'),
      cli('run', 'hello', '--agent', 'nobody'),
    ]);
    expect(sync.code, sync.stderr).toBe(0);
    expect(JSON.parse(sync.stdout)).toMatchObject({ status: 'success', agent_name: 'CLI Alt' });
    // cli-alt has no clock tool: the demo model answers without calling one.
    const frames = parseLines(streamed.stdout);
    expect(frames.find((f) => f.event === 'complete')?.data).toMatchObject({ status: 'success', agent_name: 'CLI Alt' });
    expect(frames.some((f) => f.event === 'tool_call')).toBe(false);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/agent 'nobody' was not found/);
  });
});

describe('approvals', () => {
  it('a run that waits for approval exits 3; approvals ls lists it; approvals approve resumes it', async () => {
    const r = await cli('run', 'use workspace_write', '--session', 'cli-approve');
    expect(r.code, r.stderr).toBe(3);
    const runId = /\[awaiting_approval\] run (run_\S+)/.exec(r.stderr)![1];
    const approvalId = /(approval_\S+)\s+workspace_write/.exec(r.stderr)![1];
    expect(r.stderr).toContain(`agentd approvals approve ${runId} ${approvalId}`);
    expect(r.stderr).toContain(`agentd approvals deny ${runId} ${approvalId}`);

    const [ls, lsJson] = await Promise.all([cli('approvals', 'ls'), cli('approvals', 'ls', '--json')]);
    expect(ls.code).toBe(0);
    expect(ls.stdout).toMatch(new RegExp(`${runId}\\s+${approvalId}\\s+workspace_write\\s+\\{"path":"notes.txt"`));
    const listed = JSON.parse(lsJson.stdout) as { approvals: { run_id: string; approval_id: string; status: string }[] };
    expect(listed.approvals).toContainEqual(expect.objectContaining({ run_id: runId, approval_id: approvalId, status: 'pending' }));

    const approve = await cli('approvals', 'approve', runId, approvalId, '--args', '{"path":"edited.txt","content":"x"}', '--note', 'fine');
    expect(approve.code, approve.stderr).toBe(0);
    expect(approve.stdout).toContain(`${approvalId} of run ${runId}: approved by cli-tester`);
    const run = await eventually(async () => {
      const v = (await getJson(`${server.url}/runs/${runId}`)).body;
      return v.status === 'completed' ? v : null;
    });
    expect(run.approvals[0]).toMatchObject({ approver: 'cli-tester', note: 'fine', edited_arguments: { path: 'edited.txt', content: 'x' } });
    const show = await cli('runs', 'show', runId);
    expect(show.stdout).toMatch(/status\s+completed/);
    expect(show.stdout).toContain('edited.txt');
  });

  it('approvals deny --approver NAME --note: the model is told who denied it', async () => {
    const r = await cli('run', 'use workspace_write', '--json');
    expect(r.code).toBe(3);
    const complete = parseLines(r.stdout).at(-1)!;
    expect(complete).toMatchObject({ event: 'complete', data: { status: 'awaiting_approval' } });
    const { run_id: runId, approvals } = complete.data as { run_id: string; approvals: { approval_id: string }[] };
    const deny = await cli('approvals', 'deny', runId, approvals[0].approval_id, '--approver', 'alice', '--note', 'not today', '--json');
    expect(deny.code).toBe(0);
    expect(JSON.parse(deny.stdout)).toMatchObject({ status: 'denied', approver: 'alice', note: 'not today' });
    await eventually(async () => (await getJson(`${server.url}/runs/${runId}`)).body.status === 'completed');
  });
});

describe('runs', () => {
  it('ls (filtered, --json), show, cancel of a waiting run, and a cancel that conflicts', async () => {
    const waiting = await cli('run', 'use workspace_write', '--session', 'cli-runs');
    const runId = /\[awaiting_approval\] run (run_\S+)/.exec(waiting.stderr)![1];
    const [ls, lsJson, show, showJson] = await Promise.all([
      cli('runs', 'ls', '--session', 'cli-runs'),
      cli('runs', 'ls', '--status', 'awaiting_approval', '--limit', '100', '--json'),
      cli('runs', 'show', runId),
      cli('runs', 'show', runId, '--json'),
    ]);
    expect(ls.stdout.split('\n')[0]).toMatch(/^RUN\s+STATUS\s+SESSION\s+AGENT\s+TASK\s+CREATED\s+DURATION\s+STEPS\s+TOKENS\s+COST$/);
    expect(ls.stdout).toMatch(new RegExp(`${runId}\\s+awaiting_approval\\s+cli-runs\\s+default\\s+-\\s+\\S+\\s+-\\s`));
    expect((JSON.parse(lsJson.stdout) as { runs: { run_id: string }[] }).runs.map((r) => r.run_id)).toContain(runId);
    expect(show.stdout).toMatch(/status\s+awaiting_approval/);
    expect(show.stderr).toContain(`agentd approvals approve ${runId}`);
    expect(JSON.parse(showJson.stdout)).toMatchObject({ run_id: runId, status: 'awaiting_approval' });

    // Steering a waiting run queues the message; interrupting it conflicts (it is not running).
    const steer = await cli('runs', 'steer', runId, 'keep it short', '--sender', 'cli-user');
    expect(steer.code, steer.stderr).toBe(0);
    expect(steer.stdout).toMatch(new RegExp(`^run ${runId}: message steer_\\S+ queued`));
    const interrupt = await cli('runs', 'interrupt', runId);
    expect(interrupt.code).toBe(1);
    expect(interrupt.stderr).toMatch(/^error: .*cannot be interrupted while awaiting_approval/);

    const cancel = await cli('runs', 'cancel', runId);
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(cancel.stdout).toBe(`run ${runId}: cancel requested\n`);
    await eventually(async () => (await getJson(`${server.url}/runs/${runId}`)).body.status === 'cancelled');
    const again = await cli('runs', 'resume', runId);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^error: /);
    expect(show.stdout).toMatch(/^usage\s+\d+ model calls, .* tokens, \$\d+(\.\d+)?$/m); // rounded, never a float's tail
  });

  it('ls shows the newest first (--oldest: the API order) and filters by agent, task and time range', async () => {
    for (const q of ['first', 'second']) expect((await cli('run', q, '--session', 'cli-order', '--sync')).code).toBe(0);
    const runIds = (out: string) =>
      out
        .split('\n')
        .slice(1)
        .filter(Boolean)
        .map((l) => l.split(/\s+/)[0]);
    const [newest, oldest, agent, none, bad] = await Promise.all([
      cli('runs', 'ls', '--session', 'cli-order'),
      cli('runs', 'ls', '--session', 'cli-order', '--oldest'),
      cli('runs', 'ls', '--session', 'cli-order', '--agent', 'default', '--since', '2000-01-01T00:00:00Z', '--json'),
      cli('runs', 'ls', '--session', 'cli-order', '--task', 'no-such-task', '--json'),
      cli('runs', 'ls', '--since', 'yesterday', '--json'),
    ]);
    expect(runIds(newest.stdout)).toHaveLength(2);
    expect(runIds(newest.stdout)).toEqual(runIds(oldest.stdout).reverse());
    // Ended runs show a duration and a cost.
    expect(newest.stdout.split('\n')[1]).toMatch(/\s(\d+ms|\d+\.\ds)\s+\d+\s+\d+\s+\$[\d.]+$/);
    expect((JSON.parse(agent.stdout) as { runs: unknown[] }).runs).toHaveLength(2);
    expect((JSON.parse(none.stdout) as { runs: unknown[] }).runs).toEqual([]);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stderr)).toMatchObject({ error: { type: 'api', body: { code: 'AGT_ERR_VALIDATION', detail: [{ loc: ['query', 'since'] }] } } });
  });

  it('a reader that closes early (runs show R | head -1) ends the command quietly, no EPIPE stack trace', async () => {
    const listed = JSON.parse((await cli('runs', 'ls', '--json')).stdout) as { runs: { run_id: string }[] };
    const runId = listed.runs[0]!.run_id;
    const child = spawnCli(['runs', 'show', runId], env);
    child.stdout!.destroy(); // the pipe's reader is gone before the command writes a line
    const r = await collect(child);
    expect(r.signal).toBeNull();
    expect(r.code).toBe(0);
    expect(r.stderr).not.toMatch(/EPIPE|Error|at /);
  });
});

describe('tasks', () => {
  it('create, ls, preview, run --wait, pause, resume', async () => {
    const create = await cli('tasks', 'create', '--id', 'cli-hourly', '--query', 'hello task', '--cron', '0 * * * *', '--tz', 'America/New_York');
    expect(create.code, create.stderr).toBe(0);
    expect(create.stdout).toContain('task cli-hourly created: cron 0 * * * * America/New_York');
    const [preview, previewJson, bad] = await Promise.all([
      cli('tasks', 'preview', 'cli-hourly', '--count', '3'),
      cli('tasks', 'preview', 'cli-hourly', '--json'),
      cli('tasks', 'create', '--id', 'x', '--query', 'q', '--cron', '* * * * *', '--every', '60'),
    ]);
    expect(preview.stdout.trim().split('\n')).toHaveLength(5); // title, header, 3 occurrences
    expect(preview.stdout).toMatch(/:00:00\.000Z\s+\S+-0[45]:00/);
    expect(JSON.parse(previewJson.stdout)).toMatchObject({ task_id: 'cli-hourly', timezone: 'America/New_York' });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('one schedule only');

    const run = await cli('tasks', 'run', 'cli-hourly', '--wait');
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^background run bgrun_\S+ of task cli-hourly: completed\n/);
    expect(run.stdout).toContain('hello task');

    expect((await cli('tasks', 'pause', 'cli-hourly')).stdout).toBe('task cli-hourly: paused\n');
    expect((await cli('tasks', 'ls')).stdout).toMatch(/cli-hourly\s+cron 0 \* \* \* \* America\/New_York\s+paused/);
    expect((await cli('tasks', 'resume', 'cli-hourly')).code).toBe(0);
    const ls = await cli('tasks', 'ls', '--json');
    expect((JSON.parse(ls.stdout) as { tasks: { task_id: string }[] }).tasks.map((t) => t.task_id)).toContain('cli-hourly');
    expect((await cli('tasks', 'ls')).stdout).toMatch(/cli-hourly\s+cron 0 \* \* \* \* America\/New_York\s+active\s+\d{4}-/);
  });
});

describe('events tail', () => {
  it('prints the events of a session, stops after --limit, and --json prints NDJSON', async () => {
    await cli('run', 'What time is it?', '--session', 'cli-events');
    const [lines, json] = await Promise.all([
      cli('events', 'tail', '--session', 'cli-events', '--limit', '3'),
      cli('events', 'tail', '--session', 'cli-events', '--limit', '4', '--json'),
    ]);
    expect(lines.code).toBe(0);
    const out = lines.stdout.trim().split('\n');
    expect(out).toHaveLength(3);
    expect(out[0]).toMatch(/^\d+\s+\S+Z\s+user_message\s+run_/);
    const frames = parseLines(json.stdout);
    expect(frames).toHaveLength(4);
    expect(frames[0]).toMatchObject({ event: 'user_message', data: { event_type: 'user_message', session_id: 'cli-events' } });
    // --from continues after a cursor.
    const next = await cli('events', 'tail', '--session', 'cli-events', '--from', frames[1].id, '--limit', '1', '--json');
    expect(parseLines(next.stdout)[0].id).toBe(frames[2].id);
  });

  it('follows new events until SIGINT, then exits 0', async () => {
    const child = spawnCli(['events', 'tail', '--session', 'cli-follow'], env);
    const done = collect(child);
    await waitForOutput(child, /following session cli-follow/);
    const answered = waitForOutput(child, /final_answer/);
    await cli('run', 'hello follow', '--session', 'cli-follow');
    await answered;
    child.kill('SIGINT');
    const r = await done;
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/user_message\s+run_/);
  });

  it("--run alone finds the run's session", async () => {
    const r = await cli('run', 'hello run filter', '--json');
    const runId = parseLines(r.stdout)[0].data.run_id as string;
    const tail = await cli('events', 'tail', '--run', runId, '--limit', '2', '--json');
    expect(tail.code).toBe(0);
    for (const f of parseLines(tail.stdout)) expect(f.data.run_id).toBe(runId);
  });
});

describe('budget and keys', () => {
  let budgeted: TestServer;
  let keyed: TestServer;
  const KEY = 'k-operator-0123456789';
  const ACME = 'k-acme-approver-0123456789';
  const sha = (s: string) => createHash('sha256').update(s).digest('hex');

  beforeAll(async () => {
    [budgeted, keyed] = await Promise.all([
      startTestServer({ budgets: { run: [{ meter: 'model_calls', limit: 1, on_exhausted: 'pause' }] } }),
      startTestServer({
        auth: {
          api_keys: [
            { name: 'ops', role: 'admin', key_sha256: sha(KEY) },
            { name: 'acme-approver', role: 'approver', tenant: 'acme', key_sha256: sha(ACME) },
          ],
        },
        agent: { tools: { builtin: ['clock'] } },
        // Runs saying they are finance's ask the finance-* approvers only (docs/policies.md).
        governance: {
          rules: [
            { id: 'finance', tools: ['clock'], effect: 'ask', condition: 'has(metadata.finance)', approvers: ['finance-*'] },
            { tools: ['clock'], effect: 'ask' },
          ],
        },
      }),
    ]);
  });

  afterAll(async () => {
    for (const s of [budgeted, keyed]) {
      await s?.stop();
      s?.cleanup();
    }
  });

  it('a run out of budget exits 3 with the commands; budget grant lets it finish', async () => {
    const e = cliEnv({ AGENTD_URL: budgeted.url });
    const r = await runCli(['run', 'What time is it?'], e);
    expect(r.code, r.stderr).toBe(3);
    const runId = /\[awaiting_budget\] run (run_\S+)/.exec(r.stderr)![1];
    expect(r.stderr).toContain(`agentd budget grant ${runId}`);
    const grant = await runCli(['budget', 'grant', runId, '--amount', '5', '--note', 'ok'], e);
    expect(grant.code, grant.stderr).toBe(0);
    expect(grant.stdout).toMatch(/: granted 5 model_calls by cli-tester\n$/);
    await eventually(async () => (await getJson(`${budgeted.url}/runs/${runId}`)).body.status === 'completed');
  });

  it('sends --key (or AGENTD_API_KEY) as a Bearer token; without it the 401 is explained', async () => {
    const [none, flag, fromEnv] = await Promise.all([
      runCli(['runs', 'ls'], cliEnv({ AGENTD_URL: keyed.url })),
      runCli(['runs', 'ls', '--key', KEY, '--json'], cliEnv({ AGENTD_URL: keyed.url })),
      runCli(['--url', keyed.url, 'runs', 'ls'], cliEnv({ AGENTD_API_KEY: KEY })),
    ]);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/^error: .+ \(--key or AGENTD_API_KEY\)\n$/);
    expect(flag.code, flag.stderr).toBe(0);
    expect(JSON.parse(flag.stdout)).toMatchObject({ runs: [], total: 0 });
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
  });

  it("decides as the API key's name by default (GET /whoami), not $USER", async () => {
    const auth = { authorization: `Bearer ${KEY}` };
    const paused = (await postJson(`${keyed.url}/run/sync`, { query: 'What time is it?' }, auth)).body;
    expect(paused.status).toBe('awaiting_approval');
    const approve = await runCli(
      ['approvals', 'approve', paused.run_id, paused.approvals[0].approval_id, '--key', KEY, '--json'],
      cliEnv({ AGENTD_URL: keyed.url }),
    );
    expect(approve.code, approve.stderr).toBe(0);
    expect(JSON.parse(approve.stdout)).toMatchObject({ status: 'approved', approver: 'ops' });
  });

  it("whoami names the signed-in key's tenant; approvals ls lists what the key may decide", async () => {
    const e = cliEnv({ AGENTD_URL: keyed.url });
    const me = await runCli(['whoami', '--key', ACME], e);
    expect(me.code, me.stderr).toBe(0);
    expect(me.stdout).toBe('acme-approver  role: approver  tenant: acme\n');
    const global = await runCli(['whoami', '--key', KEY, '--json'], e);
    expect(JSON.parse(global.stdout)).toMatchObject({ name: 'ops', role: 'admin', tenant: null });
    const acmeOp = { authorization: `Bearer ${KEY}`, 'x-agentd-tenant': 'acme' };
    const finance = (await postJson(`${keyed.url}/run/sync`, { query: 'What time is it?', metadata: { finance: true } }, acmeOp)).body;
    const plain = (await postJson(`${keyed.url}/run/sync`, { query: 'What time is it?' }, acmeOp)).body;
    expect([finance.status, plain.status]).toEqual(['awaiting_approval', 'awaiting_approval']);
    const ls = await runCli(['approvals', 'ls', '--key', ACME, '--json'], e);
    expect(ls.code, ls.stderr).toBe(0);
    const runIds = (JSON.parse(ls.stdout) as { approvals: Array<{ run_id: string }> }).approvals.map((a) => a.run_id);
    expect(runIds).toContain(plain.run_id);
    expect(runIds).not.toContain(finance.run_id);
  });
});

describe('checkpoints, forks, replays, comparisons, evaluations', () => {
  it('runs checkpoints|fork|replay|compare and evals create|show|ls', async () => {
    const run = await cli('run', '--sync', '--json', 'hello checkpoints');
    expect(run.code, run.stderr).toBe(0);
    const runId = JSON.parse(run.stdout).run_id as string;

    const cps = await cli('runs', 'checkpoints', runId);
    expect(cps.code, cps.stderr).toBe(0);
    expect(cps.stdout).toMatch(/^CHECKPOINT\s+STEP\s+STATE/);
    expect(cps.stdout).toMatch(/cp_1\s+1\s+calling/);
    const one = await cli('runs', 'checkpoints', runId, 'cp_1', '--json');
    expect(JSON.parse(one.stdout)).toMatchObject({ run_id: runId, checkpoint_id: 'cp_1', state: 'calling' });

    const fork = await cli('runs', 'fork', runId, 'cp_1', '--json', '--message', 'and again');
    expect(fork.code, fork.stderr).toBe(0);
    expect(JSON.parse(fork.stdout).forked_from).toEqual({ run_id: runId, checkpoint_id: 'cp_1' });
    const replay = await cli('runs', 'replay', runId, '--system', 'be brief', '--json');
    expect(replay.code, replay.stderr).toBe(0);
    const replayId = JSON.parse(replay.stdout).run_id as string;
    expect(JSON.parse(replay.stdout).replay_of.run_id).toBe(runId);
    const cmp = await cli('runs', 'compare', runId, replayId);
    expect(cmp.code, cmp.stderr).toBe(0);
    expect(cmp.stdout).toContain(replayId);
    expect((await cli('runs', 'replay', runId)).code).toBe(1); // an empty variant: the 422 is printed

    const created = await cli('evals', 'create', 'cli-eval', '--runs', runId, '--system', 'be brief', '--scorer', '{"type":"exact"}', '--json');
    expect(created.code, created.stderr).toBe(0);
    const evalId = JSON.parse(created.stdout).eval_id as string;
    await eventually(async () => (await getJson(`${server.url}/evals/${evalId}`)).body.status === 'completed');
    const show = await cli('evals', 'show', evalId);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stderr).toContain('1/1 done');
    expect(show.stdout).toContain(runId);
    const ls = await cli('evals', 'ls');
    expect(ls.stdout).toContain(evalId);
  });
});
