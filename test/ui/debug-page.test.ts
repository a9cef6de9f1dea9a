// Debugging and evaluating in the dashboard, in headless Chromium (Debian's package, driven by
// playwright-core) against a real server whose model is the scripted OpenAI-compatible server:
// the checkpoint timeline of a run that paused for a person (the wait as a gap), "fork from here"
// with an edited tool result, "replay with…", the compare view, and the Evals page (create from a
// filter, progress, aggregates, a run's diff). Screenshots go to test/ui/screenshots/ (gitignored).
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) => existsSync(p));
if (!CHROMIUM) console.warn('\n!!! test/ui/debug-page.test.ts SKIPPED: no Chromium binary (apt-get install -y chromium) !!!\n');

const SHOTS = join(import.meta.dirname, 'screenshots');

describe.skipIf(!CHROMIUM)('debugging and evaluating in the dashboard', () => {
  let model: ScriptedOpenAI;
  let s: TestServer;
  let browser: Browser;
  let page: Page;
  let runId = '';
  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    model = await startScriptedOpenAI();
    model.setDefault({ text: 'done' });
    s = await startTestServer(
      {
        agent: { tools: { builtin: ['clock'] } },
        governance: { rules: [{ tools: ['clock'], effect: 'ask', reason: 'reading the clock needs a person' }] },
      },
      { modelUrl: model.url },
    );
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    page.setDefaultTimeout(10_000);
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
    s?.cleanup();
    await model?.close();
  });

  it('shows every checkpoint of a run that paused, the wait for a person as a gap, and a checkpoint’s conversation', async () => {
    model.enqueue({ tool_calls: [{ id: 'call_clock', name: 'clock', arguments: { timezone: 'UTC' } }] }, { text: 'It is noon.' });
    const paused = (await postJson(`${s.url}/run/sync`, { query: 'what time is it?' })).body;
    expect(paused.status).toBe('awaiting_approval');
    runId = paused.run_id;
    await postJson(`${s.url}/runs/${runId}/approvals/${paused.approvals[0].approval_id}`, { decision: 'approve', approver: 'alice' });
    await eventually(async () => ((await getJson(`${s.url}/runs/${runId}`)).body.status === 'completed' ? true : null));
    const stored = (await getJson(`${s.url}/runs/${runId}/checkpoints`)).body.checkpoints as Array<{ checkpoint_id: string; state: string }>;

    await page.goto(`${s.url}/ui/runs/${runId}`);
    await expect.poll(() => page.locator('#checkpoints tr.checkpoint').count()).toBe(stored.length);
    const states = await page.locator('#checkpoints tr.checkpoint td.state').allTextContents();
    expect(states).toEqual(stored.map((c) => c.state));
    // One pause, one gap, right after the pause's row.
    const wait = page.locator('#checkpoints tr.cp-wait');
    expect(await wait.count()).toBe(1);
    expect(await wait.locator('strong').textContent()).toMatch(/^waited .+ for a person$/);
    const pauseIndex = stored.findIndex((c) => c.state === 'awaitingApproval');
    const rowClasses = await page.locator('#checkpoints tbody tr').evaluateAll((trs) => trs.map((tr) => tr.className));
    expect(rowClasses[pauseIndex + 1]).toBe('cp-wait');

    await page.locator('#checkpoints tr.checkpoint').first().locator('button.show-messages').click();
    await page.locator('#checkpoint-messages').waitFor();
    const first = JSON.parse((await page.locator('#checkpoint-messages pre').textContent())!);
    expect(first.at(-1)).toMatchObject({ role: 'user', content: 'what time is it?' });
    await shot('debug-checkpoints');
  });

  it('forks from the checkpoint after the tool batch with an edited result, then compares it with the original', async () => {
    const stored = (await getJson(`${s.url}/runs/${runId}/checkpoints`)).body.checkpoints as Array<{ checkpoint_id: string; state: string; step: number }>;
    const afterTools = stored.find((c) => c.state === 'calling' && c.step === 2)!;
    model.enqueue((req) => ({ text: `fork saw ${String(req.messages.filter((m) => m.role === 'tool').at(-1)!.content)}` }));
    await page.locator(`#checkpoints tr.checkpoint[data-checkpoint=${afterTools.checkpoint_id}] button.fork-here`).click();
    await page.locator('#fork-form').waitFor();
    await page.fill('#fork-tool-results', '{"call_clock": "midnight"}');
    await page.click('#fork-submit');
    const result = page.locator('#debug-result');
    await result.waitFor();
    expect(await result.locator('.answer-text').textContent()).toBe('fork saw midnight');
    const forkId = (await result.locator('a.mono').textContent())!;
    // The fork is a run of its own with its origin; the original did not change.
    expect((await getJson(`${s.url}/runs/${runId}`)).body.response).toBe('It is noon.');

    await result.locator('a.compare-link').click();
    await expect.poll(() => page.url()).toBe(`${s.url}/ui/compare/${runId}/${forkId}`);
    await page.locator('#compare-diff .response-diff').waitFor();
    const diff = (await page.locator('#compare-diff .response-diff').textContent())!;
    expect(diff).toContain('-It is noon.');
    expect(diff).toContain('+fork saw midnight');
    expect(await page.locator('#compare-diff .changed').textContent()).toBe('changed');
    expect(await page.locator('#compare-a .compare-response').textContent()).toBe('It is noon.');
    expect(await page.locator('#compare-b .compare-response').textContent()).toBe('fork saw midnight');
    await shot('debug-compare');
  });

  it('replays the run with another system instruction, its recorded tool answered from the recording', async () => {
    await page.goto(`${s.url}/ui/runs/${runId}`);
    await page.click('#replay-open');
    await page.locator('#replay-form').waitFor();
    await page.fill('#replay-system', 'Answer in French.');
    model.enqueue({ tool_calls: [{ id: 'v_clock', name: 'clock', arguments: { timezone: 'UTC' } }] }, (req) => ({
      text: `${String(req.messages[0].content)} / ${String(req.messages.filter((m) => m.role === 'tool').length)} tool result`,
    }));
    await page.click('#replay-submit');
    const result = page.locator('#replay-form #debug-result');
    await result.waitFor();
    // No approval asked: the recorded call carries the original's decision.
    expect(await result.locator('.status').textContent()).toBe('success');
    expect(await result.locator('.answer-text').textContent()).toBe('Answer in French. / 1 tool result');
    const replayId = (await result.locator('a.mono').textContent())!;
    const replayRun = (await getJson(`${s.url}/runs/${replayId}`)).body;
    expect(replayRun.approvals ?? []).toEqual([]);
    await shot('debug-replay');
  });

  it('creates an evaluation from a filter, shows its progress to the end, its aggregates and a run’s diff', async () => {
    const session = `ui-eval-${Date.now()}`;
    for (const q of ['one', 'two']) {
      model.enqueue({ text: `answer ${q}` });
      await postJson(`${s.url}/run/sync`, { query: q, session_id: session });
    }
    model.setDefault((req) => ({ text: `answer ${String(req.messages.at(-1)!.content)}${String(req.messages.at(-1)!.content) === 'two' ? '!' : ''}` }));
    await page.goto(`${s.url}/ui/evals`);
    await page.locator('#eval-create').waitFor();
    await page.fill('#eval-name', 'ui candidate');
    await page.fill('#eval-session', session);
    await page.fill('#eval-system', 'be brief');
    await page.click('#eval-submit');
    await expect.poll(() => page.url()).toMatch(new RegExp(`^${s.url}/ui/evals/eval_`));
    await expect.poll(() => page.locator('#eval h2 .status').textContent(), { timeout: 15_000 }).toBe('completed');
    expect(await page.locator('#eval .progress-text').textContent()).toBe('2/2');
    await expect.poll(() => page.locator('#eval-items tr.eval-item').count()).toBe(2);
    expect(await page.locator('#eval-aggregates .agg-changed').textContent()).toBe('50%');
    expect(await page.locator('#eval-aggregates .agg-score').textContent()).toBe('0.50');
    const changedRow = page.locator('#eval-items tr.eval-item', { hasText: 'changed' });
    expect(await changedRow.locator('.item-score').textContent()).toBe('0.00');
    await shot('debug-eval');

    await changedRow.locator('a.item-diff').click();
    await page.locator('#compare-diff .response-diff').waitFor();
    expect(await page.locator('#compare-diff .response-diff').textContent()).toContain('+answer two!');

    // The list shows it too.
    await page.goto(`${s.url}/ui/evals`);
    await page.locator('#evals tr[data-eval]').first().waitFor();
    expect(await page.locator('#evals tr[data-eval]', { hasText: 'ui candidate' }).locator('.status').textContent()).toBe('completed');
  });
});
