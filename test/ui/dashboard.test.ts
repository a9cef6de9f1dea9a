// The dashboard end to end in headless Chromium (Debian's package, driven by playwright-core; no
// browser download) against a real server: the demo model, builtin workspace + clock tools, and a
// governance `ask` rule on clock. A screenshot of each page goes to test/ui/screenshots/ (gitignored).
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) => existsSync(p));
if (!CHROMIUM) {
  // Loud on purpose: .ci/run installs Debian's chromium; a machine without it skips these tests.
  console.warn('\n!!! test/ui/dashboard.test.ts SKIPPED: no Chromium binary (apt-get install -y chromium) !!!\n');
}

const SHOTS = join(import.meta.dirname, 'screenshots');
const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const KEYS = { admin: 'ui-admin-key', reader: 'ui-reader-key', acme: 'ui-acme-operator-key', ops: 'ui-ops-approver-key' };
const ADMIN = { authorization: `Bearer ${KEYS.admin}` };

describe.skipIf(!CHROMIUM)('dashboard in headless Chromium', () => {
  let s: TestServer;
  let browser: Browser;
  let page: Page;
  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  const open = async (path: string) => {
    await page.goto(`${s.url}${path}`);
  };

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    s = await startTestServer({
      agent: { tools: { builtin: ['workspace', 'clock'] } },
      governance: {
        rules: [
          // Only finance-* approvers (and a global admin) decide a run that says it is finance's.
          { id: 'finance-clock', tools: ['clock'], effect: 'ask', condition: 'has(metadata.finance)', approvers: ['finance-*'] },
          { tools: ['clock'], effect: 'ask', reason: 'reading the clock needs a person' },
        ],
      },
      // One tool call per run: a run that calls two tools at once waits for a budget decision.
      budgets: { run: [{ meter: 'tool_calls', limit: 1 }] },
      auth: {
        api_keys: [
          { name: 'admin', role: 'admin', key_sha256: sha(KEYS.admin) },
          { name: 'reader', role: 'reader', key_sha256: sha(KEYS.reader) },
          { name: 'acme-ops', role: 'operator', key_sha256: sha(KEYS.acme), tenant: 'acme' },
          { name: 'ops-approver', role: 'approver', key_sha256: sha(KEYS.ops) },
        ],
      },
    });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
    s?.cleanup();
  });

  it('asks for a key, signs in, starts a run and shows its answer and trace', async () => {
    await open('/ui');
    await page.locator('input[name=api-key]').waitFor();
    await shot('sign-in');
    await page.fill('input[name=api-key]', KEYS.admin);
    await page.click('button[type=submit]');
    await expect.poll(() => page.locator('.role').textContent()).toBe('role: admin');
    // The header names the signed-in key (GET /whoami).
    expect(await page.locator('header .key-name').textContent()).toBe('admin');
    expect(await page.locator('header .tenant').count()).toBe(0); // a global key

    await page.fill('#start-run input[name=query]', 'hello dashboard');
    await page.click('#start-run button[type=submit]');
    await expect.poll(() => page.locator('#start-run .answer').textContent(), { timeout: 10_000 }).toContain('You said: "hello dashboard"');
    await expect.poll(() => page.locator('table.runs tbody tr').count(), { timeout: 5000 }).toBeGreaterThan(0);
    await shot('runs');

    await page.click('#start-run .run-link');
    await expect.poll(() => page.locator('#run-answer').textContent()).toContain('You said: "hello dashboard"');
    await expect.poll(() => page.locator('.waterfall tr.span').count()).toBeGreaterThan(1);
    expect(await page.locator('.waterfall').textContent()).toContain('model.call');
    await expect.poll(() => page.locator('.events tr').count()).toBeGreaterThan(1);
    await shot('run');
  });

  it('shows a pending approval in the inbox, checks edited arguments against the schema, approves, and the run completes', async () => {
    const started = await postJson(`${s.url}/run/sync`, { query: 'what time is it?' }, ADMIN);
    expect(started.body.status).toBe('awaiting_approval');
    const runId = started.body.run_id as string;

    // The machine view highlights where the run waits.
    await open(`/ui/machines?run=${runId}`);
    await page.locator('svg[data-machine=run] g.state.current[data-state=awaitingApproval]').waitFor();
    expect(await page.locator('svg.machine').count()).toBeGreaterThanOrEqual(4);
    await shot('machines');

    await open('/ui/approvals');
    const card = page.locator(`.approval`).filter({ hasText: runId });
    await card.waitFor();
    expect(await card.locator('.tool').textContent()).toBe('clock');
    expect(await card.locator('.reason').textContent()).toBe('reading the clock needs a person');
    // The request the run was started with, so the approver knows what the call is for.
    expect(await card.locator('.request q').textContent()).toBe('what time is it?');
    // The nav counts the runs waiting for a decision.
    const waiting = (await getJson(`${s.url}/runs?status=awaiting_approval&limit=1`, ADMIN)).body.total;
    await expect.poll(() => page.locator('header nav .pending-count').textContent(), { timeout: 10_000 }).toBe(String(waiting));
    // "Deciding as" starts from the key's name.
    expect(await page.locator('input[name=approver]').inputValue()).toBe('admin');
    await shot('approvals');

    await card.locator('textarea[name=arguments]').fill('{"timezone": 5}');
    await card.locator('button.approve').click();
    await expect.poll(() => card.locator('.error').textContent()).toContain('$.timezone must be string');
    expect((await getJson(`${s.url}/runs/${runId}`, ADMIN)).body.status).toBe('awaiting_approval');

    await card.locator('textarea[name=arguments]').fill('{"timezone": "Europe/Paris"}');
    await card.locator('button.approve').click();
    const done = await eventually(
      async () => {
        const r = (await getJson(`${s.url}/runs/${runId}`, ADMIN)).body;
        return r.status === 'completed' ? r : null;
      },
      10_000,
      'run completed',
    );
    expect(done.approvals[0].edited_arguments).toEqual({ timezone: 'Europe/Paris' });
    // Decided as the key's name, not "dashboard".
    expect(done.approvals[0].approver).toBe('admin');
    await page.locator('#inbox-empty').waitFor();
    await expect.poll(() => page.locator('header nav .pending-count').count(), { timeout: 10_000 }).toBe(0);

    // And the machine view follows it to its end.
    await open(`/ui/machines?run=${runId}`);
    await page.locator('svg[data-machine=run] g.state.current[data-state=completed]').waitFor();
  });

  it('denies an approval with a note from the inbox', async () => {
    const started = await postJson(`${s.url}/run/sync`, { query: 'what time is it now?' }, ADMIN);
    const runId = started.body.run_id as string;
    await open('/ui/approvals');
    const card = page.locator('.approval').filter({ hasText: runId });
    await card.locator('input[name=note]').fill('not during the freeze');
    await card.locator('button.deny').click();
    await card.locator('.ok').waitFor();
    const r = await eventually(
      async () => {
        const run = (await getJson(`${s.url}/runs/${runId}`, ADMIN)).body;
        return run.status !== 'awaiting_approval' && run.status !== 'running' ? run : null;
      },
      10_000,
      'run went on after the denial',
    );
    expect(r.approvals[0]).toMatchObject({ status: 'denied', note: 'not during the freeze', approver: 'admin' });
  });

  it('grants a budget request from the inbox and the run completes', async () => {
    const started = await postJson(`${s.url}/run/sync`, { query: 'workspace_list and workspace_read path=a.txt' }, ADMIN);
    expect(started.body.status).toBe('awaiting_budget');
    const runId = started.body.run_id as string;
    await open('/ui/approvals');
    const card = page.locator('.budget').filter({ hasText: runId });
    await card.waitFor();
    expect(await card.textContent()).toContain('run tool_calls');
    expect(await card.locator('input[name=amount]').inputValue()).toBe('1');
    await shot('budget');
    await card.locator('button.approve').click();
    const done = await eventually(
      async () => {
        const r = (await getJson(`${s.url}/runs/${runId}`, ADMIN)).body;
        return r.status === 'completed' ? r : null;
      },
      10_000,
      'run completed after the grant',
    );
    expect(done.budget_requests[0]).toMatchObject({ status: 'granted', amount: 1, approver: 'admin' });
  });

  it('creates a task, runs it now and downloads a file of its workspace', async () => {
    await open('/ui/background');
    await page.fill('.task-form input[name=task_id]', 'notes-task');
    await page.fill('.task-form input[name=task_query]', 'workspace_write path=notes.txt content=hello-from-the-dashboard');
    await page.click('.task-form button[type=submit]');
    const task = page.locator('.task[data-task=notes-task]');
    await task.waitFor();
    await task.locator('button.run-now').click();
    const row = page.locator('tr.bg-run').filter({ hasText: 'notes-task' }).first();
    await expect.poll(() => row.locator('.status').textContent(), { timeout: 15_000 }).toBe('completed');
    await row.click();
    const file = page.locator('a.file', { hasText: 'notes.txt' });
    await file.waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), file.click()]);
    const path = await download.path();
    expect(readFileSync(path, 'utf8')).toBe('hello-from-the-dashboard');

    // A cron task shows its next due times.
    await postJson(
      `${s.url}/background/tasks`,
      { task_id: 'nightly', query: 'hello', schedule: { type: 'cron', expression: '30 2 * * *', timezone: 'Europe/Paris' } },
      ADMIN,
    );
    const nightly = page.locator('.task[data-task=nightly]');
    await expect.poll(() => nightly.locator('.preview li').count(), { timeout: 10_000 }).toBe(3);
    await shot('background');

    // Pause (the machine view shows it), resume, edit.
    await nightly.locator('button.pause').click();
    await nightly.locator('.s-paused').waitFor();
    expect((await getJson(`${s.url}/background/tasks/nightly/status`, ADMIN)).body.schedule_state.paused).toBe(true);
    // A paused task lists no next due times, and says why.
    await nightly.locator('.no-due').waitFor();
    expect(await nightly.locator('.preview li').count()).toBe(0);
    await shot('background-paused');
    await open('/ui/machines?task=nightly');
    await page.locator('svg[data-machine=task] g.state.current[data-state=paused]').waitFor();
    await open('/ui/background');
    await nightly.locator('button.resume').click();
    await nightly.locator('button.pause').waitFor();
    expect((await getJson(`${s.url}/background/tasks/nightly/status`, ADMIN)).body.schedule_state.paused).toBe(false);
    await nightly.locator('button.edit').click();
    await nightly.locator('input[name=task_query]').fill('good evening');
    await nightly.locator('input[name=schedule_value]').fill('0 21 * * *');
    await nightly.locator('button[type=submit]').click();
    await eventually(
      async () => {
        const t = (await getJson(`${s.url}/background/tasks/nightly`, ADMIN)).body;
        return t.query === 'good evening' && t.schedule.expression === '0 21 * * *';
      },
      5000,
      'task edited',
    );
    await expect.poll(() => nightly.locator('.preview li').first().textContent(), { timeout: 10_000 }).toContain('T21:00:00');
  });

  it('lists the newest runs first past the first page of GET /runs (500)', async () => {
    const have = (await getJson(`${s.url}/runs?limit=1`, ADMIN)).body.total as number;
    let last = '';
    for (let i = have; i < 510; i += 10) {
      const batch = await Promise.all(
        Array.from({ length: 10 }, (_, j) => postJson(`${s.url}/run/sync`, { query: `bulk ${i + j}`, session_id: 'bulk' }, ADMIN)),
      );
      last = batch[9].body.run_id;
    }
    await postJson(`${s.url}/run/sync`, { query: 'the newest' }, ADMIN).then((r) => (last = r.body.run_id));
    expect((await getJson(`${s.url}/runs?limit=1`, ADMIN)).body.total).toBeGreaterThan(500);
    await open('/ui/runs');
    await expect.poll(() => page.locator('table.runs tbody tr').first().locator('td').first().textContent(), { timeout: 10_000 }).toBe(last);
  }, 60_000);

  it('shows agent, task, duration and cost columns and filters runs by task, agent and time range', async () => {
    expect((await postJson(`${s.url}/background/tasks`, { task_id: 'filtered', query: 'hello', schedule: { type: 'manual' } }, ADMIN)).status).toBe(200);
    expect((await postJson(`${s.url}/background/tasks/filtered/run`, { wait: true }, ADMIN)).status).toBe(200);
    const [run] = (await getJson(`${s.url}/runs?task_id=filtered`, ADMIN)).body.runs;
    await open('/ui/runs');
    // The table is drawn after the first GET /runs answers: wait for it before reading the headers.
    await page.locator('table.runs thead th').first().waitFor();
    const headers = await page.locator('table.runs thead th').allTextContents();
    expect(headers).toEqual(['run', 'status', 'agent', 'task', 'session', 'started', 'duration', 'tokens', 'cost', 'answer']);

    await page.fill('input[name=task-filter]', 'filtered');
    const rows = page.locator('table.runs tbody tr');
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(1);
    const row = rows.first();
    expect(await row.locator('td').first().textContent()).toBe(run.run_id);
    expect(await row.locator('td.task').textContent()).toBe('filtered');
    expect(await row.locator('td.agent').textContent()).toBe(run.agent_id);
    expect(await row.locator('td.duration').textContent()).toMatch(/^\d+(\.\d)? (ms|s)$/);
    expect(await row.locator('td.cost').textContent()).toMatch(/^\$/);
    await shot('runs-filtered');

    await page.fill('input[name=agent-filter]', 'no-such-agent');
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(0);
    await page.fill('input[name=agent-filter]', run.agent_id);
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(1);
    // A range that starts after the run was created lists nothing.
    await page.fill('input[name=since]', '2099-01-01T00:00');
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(0);
    await page.fill('input[name=since]', '');
    await page.fill('input[name=until]', '2099-01-01T00:00');
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(1);
    for (const name of ['task-filter', 'agent-filter', 'until']) await page.fill(`input[name=${name}]`, '');
  });

  it('a reader sees no start, approve, deny or cancel controls', async () => {
    const waiting = await postJson(`${s.url}/run/sync`, { query: 'what time is it?' }, ADMIN);
    expect(waiting.body.status).toBe('awaiting_approval');
    const runId = waiting.body.run_id as string;

    const reader = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
    await reader.goto(`${s.url}/ui`);
    await reader.fill('input[name=api-key]', KEYS.reader);
    await reader.click('button[type=submit]');
    await expect.poll(() => reader.locator('.role').textContent()).toBe('role: reader');
    await reader.locator('table.runs tbody tr').first().waitFor();
    expect(await reader.locator('#start-run').count()).toBe(0);

    await reader.goto(`${s.url}/ui/approvals`);
    const card = reader.locator('.approval').filter({ hasText: runId });
    await card.waitFor();
    expect(await card.locator('button').count()).toBe(0);

    await reader.goto(`${s.url}/ui/runs/${runId}`);
    await reader.locator('#run-answer').waitFor();
    expect(await reader.locator('#cancel-run').count()).toBe(0);
    expect(await reader.locator('button.approve, button.deny').count()).toBe(0);
    await reader.screenshot({ path: join(SHOTS, 'run-as-reader.png'), fullPage: true });
    await reader.context().close();

    // The admin does see them, and cancels the run from its page.
    await open(`/ui/runs/${runId}`);
    await page.locator('#cancel-run').click();
    await page.locator('#cancel-run-confirm').click(); // cancel asks first (test/ui/run-page.test.ts)
    await eventually(async () => (await getJson(`${s.url}/runs/${runId}`, ADMIN)).body.status === 'cancelled', 10_000, 'run cancelled');
  });

  it("a tenant key's dashboard names its tenant and lists only its tenant's runs", async () => {
    const theirs = await postJson(`${s.url}/run/sync`, { query: 'a global run' }, ADMIN);
    expect(theirs.status).toBe(200);
    const acme = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
    await acme.goto(`${s.url}/ui`);
    await acme.fill('input[name=api-key]', KEYS.acme);
    await acme.click('button[type=submit]');
    await expect.poll(() => acme.locator('.role').textContent()).toBe('role: operator');
    expect(await acme.locator('header .tenant').textContent()).toBe('tenant: acme');
    await acme.fill('#start-run input[name=query]', 'hello acme');
    await acme.click('#start-run button[type=submit]');
    await expect.poll(() => acme.locator('#start-run .answer').textContent(), { timeout: 10_000 }).toContain('You said: "hello acme"');
    await expect.poll(() => acme.locator('table.runs tbody tr').count(), { timeout: 5000 }).toBe(1);
    expect(await acme.locator('table.runs').textContent()).not.toContain(theirs.body.run_id);
    await acme.screenshot({ path: join(SHOTS, 'tenant.png'), fullPage: true });
    await acme.context().close();
  });

  it("an approver's inbox shows only the decisions it may take", async () => {
    const finance = await postJson(`${s.url}/run/sync`, { query: 'what time is it?', metadata: { finance: true } }, ADMIN);
    const anyone = await postJson(`${s.url}/run/sync`, { query: 'what time is it?' }, ADMIN);
    expect([finance.body.status, anyone.body.status]).toEqual(['awaiting_approval', 'awaiting_approval']);
    const ops = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
    await ops.goto(`${s.url}/ui`);
    await ops.fill('input[name=api-key]', KEYS.ops);
    await ops.click('button[type=submit]');
    await expect.poll(() => ops.locator('.role').textContent()).toBe('role: approver');
    await ops.goto(`${s.url}/ui/approvals`);
    await ops.locator('.approval').filter({ hasText: anyone.body.run_id }).waitFor();
    expect(await ops.locator('.approval').filter({ hasText: finance.body.run_id }).count()).toBe(0);
    await ops.context().close();
    // The admin (global) may decide both: both are in its inbox.
    await open('/ui/approvals');
    await page.locator('.approval').filter({ hasText: finance.body.run_id }).waitFor();
    await page.locator('.approval').filter({ hasText: anyone.body.run_id }).waitFor();
  });
});
