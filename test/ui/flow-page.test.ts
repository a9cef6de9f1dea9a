// The dashboard's Flow page in headless Chromium (Debian's package, driven by playwright-core)
// against a real server: runs queued for a concurrency key with their place and priority, a run
// whose model call waits for the provider's rate limit, and the provider key's bucket. The
// scripted model holds the first call until the test ends; the rate limit (1 request a minute)
// makes the next call wait.
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) => existsSync(p));
if (!CHROMIUM) console.warn('\n!!! test/ui/flow-page.test.ts SKIPPED: no Chromium binary (apt-get install -y chromium) !!!\n');

describe.skipIf(!CHROMIUM)('Flow page in headless Chromium', () => {
  let model: ScriptedOpenAI;
  let s: TestServer;
  let browser: Browser;
  let page: Page;
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => (release = r));

  beforeAll(async () => {
    model = await startScriptedOpenAI();
    model.setDefault(() => ({ text: 'ok', holdUntil: gate }));
    s = await startTestServer(
      { agent: { model: { rate_limit: { requests_per_minute: 1 } } }, server: { request_timeout_seconds: 120 } },
      { modelUrl: model.url },
    );
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  }, 60_000);
  afterAll(async () => {
    release();
    await browser?.close();
    await s?.stop();
    s?.cleanup();
    await model.close();
  });

  it('shows queued runs with their place and priority, the throttled run and the bucket level', async () => {
    const key = { key: 'ui:flow', limit: 1 };
    void postJson(`${s.url}/run/sync`, { query: 'head', concurrency: key }).catch(() => undefined);
    await model.waitForRequests(1);
    void postJson(`${s.url}/run/sync`, { query: 'low', concurrency: key }).catch(() => undefined);
    void postJson(`${s.url}/run/sync`, { query: 'high', concurrency: key, priority: 5 }).catch(() => undefined);
    // A run without a key: its model call waits for the rate limit the head's call used up.
    void postJson(`${s.url}/run/sync`, { query: 'throttled' }).catch(() => undefined);
    const queued = await eventually(async () => {
      const r = await getJson(`${s.url}/runs?status=queued`);
      return r.body.runs.length === 2 ? r.body.runs : null;
    });
    const throttled = await eventually(async () => {
      const r = await getJson(`${s.url}/runs?status=running`);
      return (r.body.runs as any[]).find((x) => x.throttled_until) ?? null;
    });

    await page.goto(`${s.url}/ui/flow`);
    await page.locator('#flow-queued tr[data-run]').first().waitFor();
    await expect.poll(() => page.locator('#flow-queued tr[data-run]').count()).toBe(2);
    const rows = await page.locator('#flow-queued tr[data-run]').evaluateAll((trs) =>
      trs.map((tr) => ({
        run: tr.getAttribute('data-run'),
        key: tr.querySelector('.key')!.textContent,
        position: tr.querySelector('.position')!.textContent,
        priority: tr.querySelector('.priority')!.textContent,
      })),
    );
    const byPriority = new Map(rows.map((r) => [r.priority, r]));
    expect(byPriority.get('5')).toMatchObject({ key: 'ui:flow', position: '1' });
    expect(byPriority.get('0')).toMatchObject({ key: 'ui:flow', position: '2' });
    expect(rows.map((r) => r.run).sort()).toEqual(queued.map((r: any) => r.run_id).sort());
    expect(await page.locator('#flow-queued .count').textContent()).toBe('2');

    await page.locator(`#flow-throttled tr[data-run="${throttled.run_id}"]`).waitFor();
    await page.locator('#flow-buckets tr[data-key]').first().waitFor();
    const bucket = page.locator('#flow-buckets tr[data-key]').first();
    expect(await bucket.getAttribute('data-key')).toContain('scripted');
    // The head's call and the throttled one took a request each: some budget is in use.
    expect(Number(await bucket.locator('.requests').textContent())).toBeGreaterThan(0);
    expect(await bucket.locator('.state').textContent()).toBe('open');
  });
});
