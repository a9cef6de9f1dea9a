// The Background page and a task's runs view list runs newest first past the first page of
// GET /background/runs, in headless Chromium against a real server (issue 34, item 5). The list's
// order is the order the runs were queued in (bulk, in one call). Screenshots go to
// test/ui/screenshots/ (gitignored).
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) => existsSync(p));
if (!CHROMIUM) console.warn('\n!!! test/ui/background-list.test.ts SKIPPED: no Chromium binary (apt-get install -y chromium) !!!\n');

const SHOTS = join(import.meta.dirname, 'screenshots');
/** More than one page of the list the dashboard reads (500, the API's largest page). */
const QUEUED = 520;

describe.skipIf(!CHROMIUM)('background runs newest first in headless Chromium', () => {
  let model: ScriptedOpenAI;
  let s: TestServer;
  let browser: Browser;
  let page: Page;
  const ids: string[] = [];
  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  const firstRow = () => page.locator('tr.bg-run').first().getAttribute('data-run');

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    // One run at a time, and the model never answers: the runs stay queued and cost nothing.
    model = await startScriptedOpenAI();
    model.setDefault({ hang: true });
    s = await startTestServer({ background: { concurrency: 1 } }, { modelUrl: model.url });
    for (const task of ['other', 'many']) {
      expect((await postJson(`${s.url}/background/tasks`, { task_id: task, query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
    }
    // The other task's run is queued first: a task's view must not show it.
    expect((await postJson(`${s.url}/background/tasks/other/runs`, { runs: [{}] })).status).toBe(200);
    const bulk = await postJson(`${s.url}/background/tasks/many/runs`, { runs: Array.from({ length: QUEUED }, (_, i) => ({ query: `q${i}` })) });
    expect(bulk.status, JSON.stringify(bulk.body).slice(0, 300)).toBe(200);
    const all = (await getJson(`${s.url}/background/runs?task_id=many&order=desc&limit=500`)).body.runs as Array<{ run_id: string }>;
    ids.push(...all.map((r) => r.run_id));
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

  it('the Background page shows the newest page first and "Older runs" goes on from there', async () => {
    const newest = ids[0];
    expect((await getJson(`${s.url}/background/runs?limit=1`)).body.total).toBe(QUEUED + 1);
    await page.goto(`${s.url}/ui/background`);
    await expect.poll(firstRow, { timeout: 10_000 }).toBe(newest);
    const shown = () => page.locator('tr.bg-run').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-run')));
    expect(await shown()).toEqual(ids.slice(0, 100));
    await shot('background-newest');
    await page.click('button.older');
    await expect.poll(async () => (await shown()).length).toBe(200);
    expect(await shown()).toEqual(ids.slice(0, 200));
  });

  it("a task's runs view lists only its runs, newest first", async () => {
    await page.goto(`${s.url}/ui/background/tasks/many`);
    await expect.poll(firstRow, { timeout: 10_000 }).toBe(ids[0]);
    const tasks = await page.locator('tr.bg-run td:nth-child(2)').allTextContents();
    expect(new Set(tasks)).toEqual(new Set(['many']));
    await shot('background-task-newest');
  });
});
