// `agentd serve --inspect [URL]`: the spawned service sends its actors' inspection events to the
// given WebSocket endpoint (here the relay of @statelyai/inspect/server, the one docs/machines.md
// tells people to start), says so in its log, and keeps serving when nothing listens there.
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInspectorServer } from '@statelyai/inspect/server';
import { createWebSocketReceiver, type StatelyInspectionEvent } from '@statelyai/inspect';
import { eventually, getJson, postJson, tempDir } from '../helpers/server.js';
import { buildCli, cliEnv, collect, freePort, removeCli, runCli, spawnCli, waitForOutput } from './helpers.js';

const children: ChildProcess[] = [];

beforeAll(() => buildCli());
afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  removeCli();
});

/** Starts `agentd serve` with the flags; answers the child, its URL and the log so far. */
async function serve(flags: string[]): Promise<{ child: ChildProcess; url: string; log: () => string }> {
  const child = spawnCli(['serve', '--port', '0', '--data-dir', tempDir(), ...flags], cliEnv({ AGENTD_LOG_FORMAT: 'json' }));
  children.push(child);
  let log = '';
  child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const seen = await waitForOutput(child, /listening on http:\/\/\S+:\d+ /);
  const url = /listening on (http:\/\/\S+:\d+) /.exec(seen)![1];
  return { child, url, log: () => log };
}

describe('serve --inspect', () => {
  it("sends the machines' inspection events to the given endpoint and says so", async () => {
    const port = await freePort();
    const relay = createInspectorServer({ port, autoOpen: false });
    try {
      const inspectUrl = `ws://127.0.0.1:${port}`;
      const { child, url, log } = await serve(['--inspect', inspectUrl]);
      expect(log()).toContain(`agentd: sending XState inspection events to ${inspectUrl}`);
      await eventually(() => log().includes(`agentd: connected to the XState inspector at ${inspectUrl}`), 10_000, 'connected line');
      expect((await postJson(`${url}/run/sync`, { query: 'What time is it?' })).body.status).toBe('success');

      // A second client of the relay receives what agentd sent (the relay replays its last 200).
      const received: StatelyInspectionEvent[] = [];
      createWebSocketReceiver({ server: inspectUrl }).subscribe((e) => received.push(e));
      await eventually(() => received.some((e) => e.type === '@xstate.snapshot'), 10_000, 'a snapshot event');
      expect(received.some((e) => e.type === '@xstate.actor' || e.type === '@xstate.event')).toBe(true);
      child.kill('SIGTERM');
      expect((await collect(child)).code).toBe(0);
    } finally {
      relay.stop();
    }
  });

  it('with nothing listening it warns once and serves on', async () => {
    const port = await freePort();
    const { child, url, log } = await serve(['--inspect', `ws://127.0.0.1:${port}`]);
    await eventually(() => log().includes(`cannot reach the XState inspector at ws://127.0.0.1:${port} (ECONNREFUSED)`), 10_000, 'the warning');
    expect(log()).toMatch(/"level":"warn"[^\n]*cannot reach the XState inspector/);
    expect((await getJson(`${url}/health`)).status).toBe(200);
    expect((await postJson(`${url}/run/sync`, { query: 'hello' })).body.status).toBe('success');
    child.kill('SIGTERM');
    expect((await collect(child)).code).toBe(0);
  });

  it('refuses a URL that is not ws:// or wss:// (exit 2) before starting anything', async () => {
    const r = await runCli(['serve', '--port', '0', '--inspect', 'http://localhost:8080']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--inspect: expected a ws:// or wss:// URL, got 'http://localhost:8080'");
  });
});
