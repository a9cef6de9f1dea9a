// The run page in headless Chromium (Debian's package, driven by playwright-core) against a real
// server whose model is the scripted OpenAI-compatible server: all of a run that paused for an
// approval on one timeline, the span drawer, the error and cancellation banners, and cancel's
// confirmation. Screenshots go to test/ui/screenshots/ (gitignored), as in dashboard.test.ts.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) => existsSync(p));
if (!CHROMIUM) console.warn('\n!!! test/ui/run-page.test.ts SKIPPED: no Chromium binary (apt-get install -y chromium) !!!\n');

const SHOTS = join(import.meta.dirname, 'screenshots');

describe.skipIf(!CHROMIUM)('the run page in headless Chromium', () => {
  let model: ScriptedOpenAI;
  let s: TestServer;
  let browser: Browser;
  let page: Page;
  let stopped = false;
  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  const waitStatus = (runId: string, status: string) =>
    eventually(
      async () => {
        const r = (await getJson(`${s.url}/runs/${runId}`)).body;
        return r.status === status ? r : null;
      },
      15_000,
      `run ${runId} ${status}`,
    );

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    model = await startScriptedOpenAI();
    model.setDefault({ text: 'done' });
    s = await startTestServer(
      {
        agent: { tools: { builtin: ['clock'] } },
        governance: { rules: [{ tools: ['clock'], effect: 'ask', reason: 'reading the clock needs a person' }] },
        pricing: { scripted: { input_per_million_usd: 1, output_per_million_usd: 2 } },
      },
      { modelUrl: model.url },
    );
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    // A missing element fails its step with a message, well before the test's own timeout.
    page.setDefaultTimeout(10_000);
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    if (!stopped) await s?.stop();
    s?.cleanup();
    await model?.close();
  });

  it('shows both segments of a run that paused for approval, with the wait labelled by who decided what', async () => {
    model.enqueue(
      { tool_calls: [{ id: 'call_clock', name: 'clock', arguments: { timezone: 'UTC' } }], usage: { prompt_tokens: 7, completion_tokens: 3 } },
      { text: 'It is noon.', usage: { prompt_tokens: 11, completion_tokens: 4 } },
    );
    const paused = (await postJson(`${s.url}/run/sync`, { query: 'what time is it?' })).body;
    expect(paused.status).toBe('awaiting_approval');
    const decided = await postJson(`${s.url}/runs/${paused.run_id}/approvals/${paused.approvals[0].approval_id}`, {
      decision: 'approve',
      approver: 'alice',
      arguments: { timezone: 'Europe/Paris' },
    });
    expect(decided.status).toBe(200);
    await waitStatus(paused.run_id, 'completed');

    await page.goto(`${s.url}/ui/runs/${paused.run_id}`);
    await expect.poll(() => page.locator('.waterfall tr.segment').count(), { timeout: 10_000 }).toBe(2);
    // The model call that asked for the tool (first segment) and the one after it (second).
    expect(await page.locator('.waterfall tr.span', { hasText: 'model.call' }).count()).toBe(2);
    const wait = page.locator('.waterfall tr.wait');
    expect(await wait.count()).toBe(1);
    expect(await wait.locator('strong').textContent()).toMatch(/^waited .+ for a person$/);
    expect(await wait.locator('.decision').textContent()).toMatch(/^alice approved clock \(edited arguments\) at /);
    expect(await page.locator('#run-answer').textContent()).toBe('It is noon.');
    await shot('run-segments');
  });

  it('opens a span drawer with the model call’s prompt, completion, tokens and cost, and a tool call’s arguments and result', async () => {
    // Still on the run of the previous test.
    await page.locator('.waterfall tr.span', { hasText: 'model.call' }).first().click();
    const drawer = page.locator('#span-drawer');
    await drawer.waitFor();
    expect(await drawer.locator('.tokens').textContent()).toBe('7 in / 3 out');
    expect(await drawer.locator('.cost').textContent()).toBe(`$${((7 * 1 + 3 * 2) / 1e6).toFixed(6)}`);
    expect(await drawer.locator('.timing').textContent()).toMatch(/\(\d+ ms\)$/);
    expect(JSON.parse((await drawer.locator('.span-prompt').textContent())!).last).toMatchObject({ role: 'user', content: 'what time is it?' });
    const completion = JSON.parse((await drawer.locator('.span-completion').textContent())!);
    expect(completion).toMatchObject({ finish_reason: 'tool_calls', tool_calls: [{ id: 'call_clock', name: 'clock' }] });
    await shot('span-drawer-model');

    // The first segment's tool.call is the policy check that asked; the second's ran the call.
    await page.locator('.waterfall tr.span', { hasText: 'tool.call' }).last().click();
    await expect.poll(async () => drawer.locator('h3').textContent()).toContain('tool.call');
    expect(JSON.parse((await drawer.locator('.span-arguments').textContent())!)).toEqual({ arguments: { timezone: 'Europe/Paris' }, edited: true });
    expect(await drawer.locator('.span-result').count()).toBe(1);
    expect(await drawer.locator('.span-error').count()).toBe(0);
    await shot('span-drawer-tool');
    await page.click('#span-drawer-close');
    expect(await drawer.count()).toBe(0);
  });

  it('shows the whole prompt the second model call saw, not only its last message', async () => {
    await page.locator('.waterfall tr.span', { hasText: 'model.call' }).last().click();
    const drawer = page.locator('#span-drawer');
    await drawer.waitFor();
    const input = JSON.parse((await drawer.locator('.span-prompt').textContent())!);
    expect(input.prompt_omitted).toBe(0);
    expect(input.prompt.length).toBe(input.messages);
    const roles = input.prompt.map((m: { role: string }) => m.role);
    expect(roles.slice(roles.indexOf('user'))).toEqual(['user', 'assistant', 'tool']);
    expect(input.prompt.find((m: { role: string }) => m.role === 'user').content).toBe('what time is it?');
    await shot('span-drawer-prompt');
    await page.click('#span-drawer-close');
  });

  it('shows a failed run as a banner with the error code and message, not JSON under "Answer"', async () => {
    model.enqueue({ status: 400, message: 'context length exceeded' });
    const failed = (await postJson(`${s.url}/run/sync`, { query: 'fail please' })).body;
    const run = await waitStatus(failed.run_id, 'failed');
    await page.goto(`${s.url}/ui/runs/${failed.run_id}`);
    const banner = page.locator('#run-banner');
    await banner.waitFor();
    expect(await banner.locator('.code').textContent()).toBe(run.error.type);
    expect(await banner.locator('.message').textContent()).toBe(run.error.message);
    expect(run.error.message).toContain('context length exceeded');
    expect(await page.locator('#run-answer').count()).toBe(0);
    expect(await page.locator('.card').first().textContent()).not.toContain('{"type"');
    await shot('run-failed');
  });

  it('asks before cancelling, and shows the cancellation as a banner', async () => {
    model.enqueue({ tool_calls: [{ id: 'call_c2', name: 'clock', arguments: {} }] });
    const paused = (await postJson(`${s.url}/run/sync`, { query: 'time again?' })).body;
    expect(paused.status).toBe('awaiting_approval');
    await page.goto(`${s.url}/ui/runs/${paused.run_id}`);
    await page.click('#cancel-run');
    await page.locator('#cancel-confirm').waitFor();
    await shot('run-cancel-confirm');
    // Asking changed nothing; "keep" takes the question back.
    expect((await getJson(`${s.url}/runs/${paused.run_id}`)).body.status).toBe('awaiting_approval');
    await page.click('#cancel-run-keep');
    await page.locator('#cancel-run').waitFor();
    expect((await getJson(`${s.url}/runs/${paused.run_id}`)).body.status).toBe('awaiting_approval');

    await page.click('#cancel-run');
    await page.click('#cancel-run-confirm');
    const run = await waitStatus(paused.run_id, 'cancelled');
    const banner = page.locator('#run-banner');
    await expect.poll(() => banner.locator('.code').textContent(), { timeout: 15_000 }).toBe(run.error?.type ?? run.stop_reason ?? 'cancelled');
    await shot('run-cancelled');
  });

  it("offers Interrupt on a running run, not on a running background run's agent run (its background run owns it)", async () => {
    // A background run's first agent run has the background run's id (docs/background.md).
    const running = (runId?: string) =>
      eventually(
        async () => {
          const runs = (await getJson(`${s.url}/runs?status=running`)).body.runs as Array<{ run_id: string }>;
          return runs.find((r) => runId === undefined || r.run_id === runId) ?? null;
        },
        15_000,
        `a running run ${runId ?? ''}`,
      );
    let releaseBg!: () => void;
    model.enqueue({ text: 'bg held', holdUntil: new Promise<void>((r) => (releaseBg = r)) });
    expect((await postJson(`${s.url}/background/tasks`, { task_id: 'held', query: 'hold the background', schedule: { type: 'manual' } })).status).toBe(200);
    const bg = (await postJson(`${s.url}/background/tasks/held/run`, {})).body;
    const agentRun = await running(bg.run_id);
    await page.goto(`${s.url}/ui/runs/${agentRun.run_id}`);
    await page.locator('a.task-link').waitFor();
    expect(await page.locator('#interrupt-run').count()).toBe(0);
    expect((await postJson(`${s.url}/runs/${agentRun.run_id}/interrupt`, {})).body.code).toBe('AGT_ERR_RUN_IS_BACKGROUND');
    releaseBg();
    await eventually(async () => (await getJson(`${s.url}/background/runs/${bg.run_id}`)).body.status === 'completed', 15_000, 'the background run completed');

    let release!: () => void;
    model.enqueue({ text: 'plain held', holdUntil: new Promise<void>((r) => (release = r)) });
    const answered = postJson(`${s.url}/run/sync`, { query: 'hold the plain run' });
    const plain = await running();
    await page.goto(`${s.url}/ui/runs/${plain.run_id}`);
    await page.locator('#interrupt-run').waitFor();
    release();
    expect((await answered).body.status).toBe('success');
  });

  it('links a background run to its run page and trace, and gives a task its own runs view', async () => {
    expect((await postJson(`${s.url}/background/tasks`, { task_id: 'nightly', query: 'summarise', schedule: { type: 'manual' } })).status).toBe(200);
    const bg = (await postJson(`${s.url}/background/tasks/nightly/run`, { wait: true })).body;
    expect(bg.status).toBe('completed');
    await page.goto(`${s.url}/ui/background`);
    await page.locator('.task[data-task=nightly] a.task-runs').click();
    await expect.poll(() => page.url()).toBe(`${s.url}/ui/background/tasks/nightly`);
    const row = page.locator(`table.bg-runs tr.bg-run[data-run="${bg.run_id}"]`);
    await row.waitFor();
    expect(await page.locator('table.bg-runs tr.bg-run').count()).toBe(1);
    expect(await page.locator('.card h3', { hasText: 'Runs of nightly' }).count()).toBe(1);
    await shot('task-runs');

    await row.locator('a.run-trace').click();
    await expect.poll(() => page.url()).toBe(`${s.url}/ui/runs/${bg.run_id}#trace`);
    await expect.poll(() => page.locator('#run-answer').textContent()).toBe('done');
    await expect.poll(() => page.locator('#trace .waterfall tr.span').count()).toBeGreaterThan(1);
    expect(await page.locator('a.task-link').textContent()).toBe('task nightly');
    await shot('background-run-page');
    await page.locator('a.task-link').click();
    await expect.poll(() => page.url()).toBe(`${s.url}/ui/background/tasks/nightly`);
  });

  it('shows the edited arguments on an approval card once it is approved with them', async () => {
    model.enqueue({ tool_calls: [{ id: 'call_e', name: 'clock', arguments: { timezone: 'UTC' } }] }, { text: 'edited' });
    const paused = (await postJson(`${s.url}/run/sync`, { query: 'clock please' })).body;
    await page.goto(`${s.url}/ui/approvals`);
    const card = page.locator('.approval').filter({ hasText: paused.run_id });
    await card.locator('textarea[name=arguments]').fill('{"timezone": "Asia/Tokyo"}');
    await card.locator('button.approve').click();
    // Read in one DOM snapshot: the inbox drops the card at its next poll.
    const shown = await page.waitForFunction((runId) => {
      const c = [...(globalThis as any).document.querySelectorAll('.approval')].find((e: any) => e.textContent?.includes(runId));
      return c?.querySelector('.ok') ? (c.querySelector('pre.arguments')?.className ?? '') + '|' + c.querySelector('pre.arguments')?.textContent : null;
    }, paused.run_id);
    const [cls, text] = String(await shown.jsonValue()).split('|');
    expect(cls).toContain('edited');
    expect(JSON.parse(text)).toEqual({ timezone: 'Asia/Tokyo' });
    expect((await waitStatus(paused.run_id, 'completed')).approvals[0].edited_arguments).toEqual({ timezone: 'Asia/Tokyo' });
  });

  it('clears a task\'s "queued a run" notice after a few seconds', async () => {
    await page.goto(`${s.url}/ui/background/tasks/nightly`);
    const task = page.locator('.task[data-task=nightly]');
    await task.locator('button.run-now').click();
    await expect.poll(() => task.locator('.notice').textContent()).toBe('queued a run');
    await shot('task-notice');
    await expect.poll(() => task.locator('.notice').count(), { timeout: 10_000 }).toBe(0);
  });

  it('scrolls the machines page to the followed machine, and writes no XState internals', async () => {
    await page.goto(`${s.url}/ui/machines?task=nightly`);
    await page.locator('svg[data-machine=task] g.state.current').waitFor();
    const box = await page.locator('#machine-task').boundingBox();
    expect(box).not.toBeNull();
    // In view: the card starts within the viewport (the run machine above it is taller than it).
    expect(box!.y).toBeGreaterThanOrEqual(-1);
    expect(box!.y).toBeLessThan(900);
    expect(await page.evaluate(() => (globalThis as any).scrollY as number)).toBeGreaterThan(0);
    expect(await page.locator('main').textContent()).not.toContain('xstate.');
    await shot('machines-followed');
  });

  // Last: it stops the server.
  it('says the service cannot be reached, not "TypeError: Failed to fetch", when the server is down', async () => {
    await page.goto(`${s.url}/ui/runs`);
    await page.locator('table.runs tbody tr').first().waitFor();
    await s.stop();
    stopped = true;
    const offline = page.locator('#offline');
    await offline.waitFor({ timeout: 15_000 });
    expect(await offline.textContent()).toContain('Cannot reach the agentd service');
    expect(await page.locator('body').textContent()).not.toContain('Failed to fetch');
    await shot('offline');
  });
});
