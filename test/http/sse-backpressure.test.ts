// SSE streams under load, against a real server with real sockets:
// every stream kind delivers bursts far past a socket's buffer (a corked socket used to wait
// forever for a 'drain'), and a reader that stops reading is dropped with a resumable cursor
// while other readers and the run go on.
import net from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { readSse, type Frame } from '../helpers/sse.js';
import { encodeFrame, formatFrame, serializedSize } from '../../src/http/sse.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');

/** Reads an SSE response until `until` says stop, the stream ends, or the deadline passes (then throws). */
async function collect(res: Response, ac: AbortController, until: (frames: Frame[]) => boolean, ms = 15_000): Promise<Frame[]> {
  const frames: Frame[] = [];
  const timer = setTimeout(() => ac.abort(), ms);
  try {
    for await (const f of readSse(res)) {
      frames.push(f);
      if (until(frames)) break;
    }
  } catch (err) {
    if (!ac.signal.aborted) throw err;
  } finally {
    clearTimeout(timer);
  }
  if (ac.signal.aborted) throw new Error(`stream stalled after ${frames.length} frames (last: ${frames.at(-1)?.event})`);
  ac.abort();
  return frames;
}

async function openStream(url: string, init: RequestInit = {}): Promise<{ res: Response; ac: AbortController }> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 15_000); // the old code never even sent the headers
  const res = await fetch(url, { ...init, signal: ac.signal }).finally(() => clearTimeout(timer));
  expect(res.headers.get('content-type')).toContain('text/event-stream');
  return { res, ac };
}

async function runStream(baseUrl: string, body: unknown): Promise<Frame[]> {
  const { res, ac } = await openStream(`${baseUrl}/run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return collect(res, ac, (fr) => fr.at(-1)!.event === 'complete' || fr.at(-1)!.event === 'error');
}

async function storedEvents(baseUrl: string, sessionId: string): Promise<Array<{ cursor: string; event_type: string }>> {
  const out: Array<{ cursor: string; event_type: string }> = [];
  let cursor: string | null = null;
  for (;;) {
    const page = await getJson(`${baseUrl}/telemetry/events?session_id=${sessionId}&limit=1000${cursor ? `&cursor=${cursor}` : ''}`);
    out.push(...page.body.events);
    cursor = page.body.next_cursor;
    if (!cursor) return out;
  }
}

const big = (n: number, seed: string) => `${seed}:` + 'x'.repeat(n);

describe('every stream kind delivers bursts larger than a socket buffer', () => {
  let model: ScriptedOpenAI;
  let server: TestServer;

  beforeAll(async () => {
    model = await startScriptedOpenAI();
    server = await startTestServer({ agent: { tools: { local: TOOLS } } }, { modelUrl: model.url });
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
    await model.close();
  });
  beforeEach(() => {
    model.reset();
    model.setDefault((req) => (req.messages.at(-1)?.role === 'tool' ? { text: 'done with the tool' } : { text: 'plain answer' }));
  });

  it('POST /run streams a 24 KB tool result and an 8 KB query to the complete frame', async () => {
    const text = big(24_000, 'tool');
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text } }] }, { text: 'echoed it' });
    const query = big(8_000, 'query');
    const frames = await runStream(server.url, { query });
    const complete = frames.at(-1)!;
    expect(complete.event).toBe('complete');
    expect(complete.data).toMatchObject({ status: 'success', response: 'echoed it' });
    expect(frames.find((f) => f.event === 'user_message')).toBeTruthy();
    expect(JSON.stringify(frames.find((f) => f.event === 'user_message')!.data)).toContain(query);
    const result = frames.find((f) => f.event === 'tool_result')!;
    expect(JSON.stringify(result.data)).toContain(`echo: ${text}`);
    // Every stored event of the run went out, in cursor order.
    const stored = await storedEvents(server.url, complete.data.session_id);
    const streamed = frames.filter((f) => f.id !== undefined).map((f) => f.id);
    expect(streamed).toEqual(stored.map((e) => e.cursor));
  });

  it('GET /telemetry/events/stream and GET /events/{id} replay a 60-event session with big events, then follow', async () => {
    const session = `replay-${Date.now()}`;
    for (let i = 0; i < 6; i++) {
      model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: big(6_000, `r${i}`) } }] }, { text: `answer ${i}` });
      const frames = await runStream(server.url, { query: big(4_000, `q${i}`), session_id: session });
      expect(frames.at(-1)!.event).toBe('complete');
    }
    const stored = await storedEvents(server.url, session);
    expect(stored.length).toBeGreaterThanOrEqual(50);
    for (const path of [`/telemetry/events/stream?session_id=${session}`, `/events/${session}`]) {
      const { res, ac } = await openStream(`${server.url}${path}`);
      const frames = await collect(res, ac, (fr) => fr.filter((f) => f.id !== undefined).length >= stored.length);
      expect(frames[0].event).toBe('session');
      expect(frames.filter((f) => f.id !== undefined).map((f) => f.id)).toEqual(stored.map((e) => e.cursor));
    }
    // Follow: a live run with a 24 KB tool result reaches an open stream whole.
    const { res, ac } = await openStream(`${server.url}/events/${session}`, { headers: { 'last-event-id': stored.at(-1)!.cursor } });
    const text = big(24_000, 'live');
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text } }] }, { text: 'live answer' });
    const run = runStream(server.url, { query: 'live one', session_id: session });
    const live = await collect(res, ac, (fr) => fr.some((f) => f.event === 'final_answer'));
    await run;
    expect(live.filter((f) => f.id !== undefined).every((f) => f.id! > stored.at(-1)!.cursor)).toBe(true);
    expect(JSON.stringify(live.find((f) => f.event === 'tool_result')!.data)).toContain(`echo: ${text}`);
  });
});

/** Reads a stream in the background until stopped. */
function follow(url: string): { frames: Frame[]; ids: () => string[]; stop: () => void } {
  const ac = new AbortController();
  const frames: Frame[] = [];
  void (async () => {
    const res = await fetch(url, { signal: ac.signal });
    for await (const f of readSse(res)) frames.push(f);
  })().catch(() => undefined);
  return { frames, ids: () => frames.filter((f) => f.id !== undefined).map((f) => f.id!), stop: () => ac.abort() };
}

/** A client that sends a request and then reads nothing until told to. */
class StalledReader {
  private readonly socket: net.Socket;
  private chunks: Buffer[] = [];
  readonly ended: Promise<void>;

  constructor(port: number, request: string) {
    this.socket = net.connect(port, '127.0.0.1', () => {
      this.socket.write(request);
      this.socket.pause();
    });
    this.ended = new Promise((resolve) => this.socket.on('close', () => resolve()));
    this.socket.on('error', () => undefined);
  }

  /**
   * Reads everything the server sent until it closes the connection; answers the SSE frames.
   * The deadline only stops a hung test: under load (the server, the scripted model and this
   * reader share one event loop, with the run still streaming megabytes) reading the ~4 MB a
   * stalled socket holds can take tens of seconds.
   */
  async readToEnd(ms = 90_000): Promise<Frame[]> {
    this.socket.on('data', (c: Buffer) => this.chunks.push(c));
    this.socket.resume();
    const timer = setTimeout(() => this.socket.destroy(), ms);
    await this.ended;
    clearTimeout(timer);
    const text = Buffer.concat(this.chunks).toString('utf8');
    const bodyStart = text.indexOf('\r\n\r\n');
    expect(text.slice(0, bodyStart)).toMatch(/^HTTP\/1\.1 200[\s\S]*content-type: text\/event-stream/i);
    return parseFrames(dechunk(text.slice(bodyStart + 4)));
  }

  destroy(): void {
    this.socket.destroy();
  }
}

function dechunk(body: string): string {
  let out = '';
  let rest = body;
  for (;;) {
    const nl = rest.indexOf('\r\n');
    if (nl === -1) return out;
    const size = parseInt(rest.slice(0, nl), 16);
    if (!Number.isFinite(size) || size === 0) return out;
    out += rest.slice(nl + 2, nl + 2 + size);
    rest = rest.slice(nl + 2 + size + 2);
  }
}

/** Complete frames only: a connection cut mid-frame leaves a partial one, which is ignored. */
function parseFrames(text: string): Frame[] {
  const frames: Frame[] = [];
  const blocks = text.split('\n\n');
  blocks.pop(); // after the last "\n\n": empty, or a partial frame
  for (const block of blocks) {
    let event = 'message';
    let id: string | undefined;
    let data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('id: ')) id = line.slice(4);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    if (!data) continue;
    frames.push({ event, id, data: JSON.parse(data) });
  }
  return frames;
}

async function promMetric(baseUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics/prometheus`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  if (!m) throw new Error(`metric ${name} not exported`);
  return Number(m[1]);
}

// Above the largest burst a run publishes at once (a step's tool calls and results, ~250 KB).
const MAX_BYTES = 1024 * 1024;

describe('a reader that stops reading is dropped, and resumes with Last-Event-ID', () => {
  let model: ScriptedOpenAI;
  let server: TestServer;

  beforeAll(async () => {
    model = await startScriptedOpenAI();
    server = await startTestServer(
      {
        agent: { tools: { local: TOOLS } },
        // The tests read a dropped stream's error frame only after they saw the drop in the metrics,
        // and then read the megabytes before it; under load (13+ on 2 cores) that took 10-30 s, past
        // the default 5 s grace, and the socket was destroyed with a delta last. The grace is tested
        // on its own below.
        server: { stream_max_queued_events: 100, stream_max_queued_bytes: MAX_BYTES, stream_drop_grace_seconds: 600 },
      },
      { modelUrl: model.url },
    );
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
    await model.close();
  });
  beforeEach(() => {
    model.reset();
  });

  /** Each run: one model step of 5 echo calls of 24 KB (~360 KB of frames, one burst under the bound), then an answer. */
  const echoSteps = (tag: string) => {
    model.setDefault((req) =>
      req.messages.at(-1)?.role === 'tool'
        ? { text: `done ${tag}` }
        : { tool_calls: Array.from({ length: 5 }, (_, i) => ({ name: 'echo', arguments: { text: big(24_000, `${tag}-${i}`) } })) },
    );
  };

  it('GET /events/{session_id}: the stalled reader gets StreamOverflow and is closed; others and the runs are unaffected; resuming misses nothing', async () => {
    const session = `slow-follow-${Date.now()}`;
    const port = Number(new URL(server.url).port);
    const droppedBefore = await promMetric(server.url, 'agentd_sse_streams_dropped_total');
    const slow = new StalledReader(port, `GET /events/${session} HTTP/1.1\r\nhost: localhost:${port}\r\naccept: text/event-stream\r\n\r\n`);
    const healthy = follow(`${server.url}/telemetry/events/stream?session_id=${session}`);
    await eventually(async () => (await promMetric(server.url, 'agentd_sse_streams')) >= 2, 5_000, 'both streams open');

    echoSteps('f');
    let maxBuffered = 0;
    for (let i = 0; i < 40 && (await promMetric(server.url, 'agentd_sse_streams_dropped_total')) === droppedBefore; i++) {
      const r = await postJson(`${server.url}/run/sync`, { query: `load ${i}`, session_id: session });
      expect(r.body.status).toBe('success');
      maxBuffered = Math.max(maxBuffered, await promMetric(server.url, 'agentd_sse_buffered_bytes'));
    }
    expect(await promMetric(server.url, 'agentd_sse_streams_dropped_total')).toBe(droppedBefore + 1);
    // What the server held for the stalled reader stayed near the bound: the follow backlog, half a
    // queue, one 64 KiB batch and the socket's own buffer; megabytes were published meanwhile.
    expect(maxBuffered).toBeLessThan(2 * MAX_BYTES + 128 * 1024);

    const slowFrames = await slow.readToEnd();
    const last = slowFrames.at(-1)!;
    expect(last.event).toBe('error');
    expect(last.data).toMatchObject({ error: 'StreamOverflow', last_cursor: expect.any(String) });
    const delivered = slowFrames.filter((f) => f.id !== undefined).map((f) => f.id!);
    expect(last.data.last_cursor).toBe(delivered.at(-1));

    const stored = (await storedEvents(server.url, session)).map((e) => e.cursor);
    // The reader that kept reading, on the same session the whole time, got every event and was never dropped.
    await eventually(() => healthy.ids().length >= stored.length, 10_000, 'the healthy reader caught up');
    expect(healthy.ids()).toEqual(stored);
    expect(healthy.frames.some((f) => f.event === 'error')).toBe(false);
    healthy.stop();

    const resumed = await openStream(`${server.url}/events/${session}`, { headers: { 'last-event-id': last.data.last_cursor } });
    const rest = await collect(resumed.res, resumed.ac, (fr) => fr.filter((f) => f.id !== undefined).length >= stored.length - delivered.length);
    const all = [...delivered, ...rest.filter((f) => f.id !== undefined).map((f) => f.id!)];
    expect(all).toEqual(stored);
  }, 240_000);

  it('a reader that keeps up is not dropped by a burst far past the bound (3,000 deltas queued at once)', async () => {
    const droppedBefore = await promMetric(server.url, 'agentd_sse_streams_dropped_total');
    const text = Array.from({ length: 3000 }, (_, i) => `w${i}-${'y'.repeat(200)}`).join(' ');
    model.enqueue({ text });
    const frames = await runStream(server.url, { query: 'a burst' });
    expect(frames.at(-1)!.event).toBe('complete');
    expect(
      frames
        .filter((f) => f.event === 'delta')
        .map((f) => f.data.text)
        .join(''),
    ).toBe(text);
    expect(await promMetric(server.url, 'agentd_sse_streams_dropped_total')).toBe(droppedBefore);
  });

  it('POST /run: a stalled reader is dropped without cancelling the run; the run succeeds and its events resume from last_cursor', async () => {
    const session = `slow-run-${Date.now()}`;
    const port = Number(new URL(server.url).port);
    const droppedBefore = await promMetric(server.url, 'agentd_sse_streams_dropped_total');
    // One answer of 10,000 words of 1 KB: 10,000 delta frames (10 MB), far past the ~4 MB a stalled
    // loopback socket absorbs and then the bound (stored events carry a truncated copy of the text).
    model.enqueue({ text: Array.from({ length: 10_000 }, (_, i) => `w${i}-${'y'.repeat(1000)}`).join(' ') });
    const body = JSON.stringify({ query: 'a long run', session_id: session });
    const slow = new StalledReader(
      port,
      `POST /run HTTP/1.1\r\nhost: localhost:${port}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await eventually(
      async () => (await promMetric(server.url, 'agentd_sse_streams_dropped_total')) === droppedBefore + 1,
      120_000,
      'the stalled POST /run stream dropped',
    );
    // However late this reads, the server waits for it (stream_drop_grace_seconds above).
    const frames = await slow.readToEnd();
    const runId: string = frames[0].data.run_id;
    const run = await eventually(
      async () => {
        const r = await getJson(`${server.url}/runs/${runId}`);
        return r.body.status !== 'running' && r.body;
      },
      120_000,
      'the run finished',
    );
    expect(run.status).toBe('completed'); // not cancelled: the server dropped the stream, the client did not close it

    expect(frames[0]).toMatchObject({ event: 'session', data: { run_id: runId, session_id: session } });
    const last = frames.at(-1)!;
    expect(last).toMatchObject({ event: 'error', data: { error: 'StreamOverflow', run_id: runId, session_id: session } });
    expect(frames.some((f) => f.event === 'complete')).toBe(false);
    const delivered = frames.filter((f) => f.id !== undefined).map((f) => f.id!);
    expect(last.data.last_cursor).toBe(delivered.at(-1));

    const stored = (await storedEvents(server.url, session)).filter((e: any) => e.run_id === runId).map((e) => e.cursor);
    expect(stored.length).toBeGreaterThan(delivered.length);
    const resumed = await openStream(`${server.url}/events/${session}?run_id=${runId}`, { headers: { 'last-event-id': last.data.last_cursor } });
    // Megabytes of stored events to replay: the deadline only stops a hung test, so it is far
    // above what a loaded machine needs; nothing here waits for a time to pass.
    const rest = await collect(resumed.res, resumed.ac, (fr) => fr.filter((f) => f.id !== undefined).length >= stored.length - delivered.length, 120_000);
    expect([...delivered, ...rest.filter((f) => f.id !== undefined).map((f) => f.id!)]).toEqual(stored);
  }, 480_000);
});

describe('server.stream_drop_grace_seconds', () => {
  let model: ScriptedOpenAI;
  let server: TestServer;

  beforeAll(async () => {
    model = await startScriptedOpenAI();
    server = await startTestServer(
      { agent: { tools: { local: TOOLS } }, server: { stream_max_queued_events: 100, stream_max_queued_bytes: MAX_BYTES, stream_drop_grace_seconds: 0.2 } },
      { modelUrl: model.url },
    );
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
    await model.close();
  });

  it('a dropped reader that never reads up to its error frame loses the connection after the grace', async () => {
    const session = `grace-${Date.now()}`;
    const port = Number(new URL(server.url).port);
    const streamsBefore = await promMetric(server.url, 'agentd_sse_streams');
    const slow = new StalledReader(port, `GET /events/${session} HTTP/1.1\r\nhost: localhost:${port}\r\naccept: text/event-stream\r\n\r\n`);
    await eventually(async () => (await promMetric(server.url, 'agentd_sse_streams')) > streamsBefore, 5_000, 'the stream open');
    model.setDefault((req) =>
      req.messages.at(-1)?.role === 'tool'
        ? { text: 'done' }
        : { tool_calls: Array.from({ length: 5 }, (_, i) => ({ name: 'echo', arguments: { text: big(24_000, `g-${i}`) } })) },
    );
    const droppedBefore = await promMetric(server.url, 'agentd_sse_streams_dropped_total');
    for (let i = 0; i < 40 && (await promMetric(server.url, 'agentd_sse_streams_dropped_total')) === droppedBefore; i++) {
      expect((await postJson(`${server.url}/run/sync`, { query: `load ${i}`, session_id: session })).body.status).toBe('success');
    }
    expect(await promMetric(server.url, 'agentd_sse_streams_dropped_total')).toBe(droppedBefore + 1);
    // The reader has not read a byte: its socket still holds megabytes before the error frame, so
    // the stream can only end by the server destroying the connection once the grace is over.
    await eventually(async () => (await promMetric(server.url, 'agentd_sse_streams')) === streamsBefore, 60_000, 'the dropped stream closed');
    slow.destroy();
  }, 240_000);
});

describe('formatFrame and encodeFrame', () => {
  it('writes id, event and one data line, and counts UTF-8 bytes', () => {
    const data = { text: 'line one\nline two\r\u2028 é 漢', n: 1 };
    const { text, bytes } = formatFrame({ event: 'tool_result', id: '0000000000000042', data });
    expect(text).toBe(`id: 0000000000000042\nevent: tool_result\ndata: ${JSON.stringify(data)}\n\n`);
    expect(text.split('\n').filter((l) => l.startsWith('data: '))).toHaveLength(1);
    expect(bytes).toBe(Buffer.byteLength(text));
    expect(formatFrame({ event: 'delta', data: { text: 'hi' } }).text).toBe('event: delta\ndata: {"text":"hi"}\n\n');
  });

  it('encodes a stored event once, into one Buffer every stream writes from', () => {
    const event = { event_id: 'event_1', event_type: 'tool_result', timestamp: '2026-01-01T00:00:00.000Z', cursor: '0000000000000007', output: 'é' };
    const frame = { event: event.event_type, id: event.cursor, data: event };
    const a = encodeFrame(frame);
    const b = encodeFrame(frame);
    expect(a.chunk).toBeInstanceOf(Buffer);
    expect(b.chunk).toBe(a.chunk);
    expect(a.chunk.toString()).toBe(formatFrame(frame).text);
    expect(serializedSize(event)).toBe(a.bytes);
    expect(a.bytes).toBe(Buffer.byteLength(formatFrame(frame).text));
    // The same object under another id or name is not served from the cache.
    expect(encodeFrame({ ...frame, event: 'other' }).chunk.toString()).toContain('event: other\n');
    // Frames without an id (deltas, complete) are written as text, not cached.
    expect(typeof encodeFrame({ event: 'delta', data: { text: 'x' } }).chunk).toBe('string');
  });
});
