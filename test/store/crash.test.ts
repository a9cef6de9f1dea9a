// Kill -9 a writer mid-flight and check that every acknowledged write survived intact, and that
// unacknowledged ones are either fully there or fully absent (a commit of two records never
// lands half-way). Flow control in the child (see crash-child.ts) makes the kill point exact.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'vitest';
import { LevelStore } from '../../src/store/level.js';
import type { StoredEvent } from '../../src/store/store.js';
import { WRITES, crashEvents, crashValue } from './crash-shared.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');

interface ChildRun {
  acks: string[];
  signal: NodeJS.Signals | null;
  code: number | null;
}

/** Runs the child until it has acknowledged `killAt` writes, then SIGKILLs it. */
function runChild(dir: string, killAt: number): Promise<ChildRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(here, 'crash-child.ts'), dir], {
      cwd: root,
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const acks: string[] = [];
    let partial = '';
    let killed = false;
    child.stdin.on('error', () => undefined); // the child may die while we write credit
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop()!;
      acks.push(...lines.filter(Boolean));
      if (killed) return;
      if (acks.length >= killAt) {
        killed = true;
        child.kill('SIGKILL');
      } else {
        child.stdin.write(`${acks.length}\n`);
      }
    });
    child.on('error', reject);
    // 'close' fires after stdout is drained, so every line the child printed has been read.
    child.on('close', (code, signal) => resolve({ acks, code, signal }));
  });
}

describe('LevelStore survives SIGKILL', () => {
  // Concurrent: each case has its own dir and child, and flow control makes timing irrelevant;
  // running them side by side mostly saves three child start-ups' worth of wall time.
  it.concurrent.for([230, 480, 770])('keeps every write acknowledged before a kill at %i acks', async (killAt, { expect }) => {
    const dir = await mkdtemp(join(tmpdir(), 'agentd-store-crash-'));
    try {
      const { acks, signal } = await runChild(dir, killAt);
      expect(signal).toBe('SIGKILL');
      expect(acks.length).toBeGreaterThanOrEqual(killAt);
      expect(acks.length).toBeLessThan(WRITES);

      const store = new LevelStore({ path: dir });
      await store.open();
      try {
        let maxCursor = '';
        for (const line of acks) {
          const [tag, iText, cursorList] = line.split(' ');
          const i = Number(iText);
          if (tag === 'R') {
            expect(await store.getRecord('runs', `rec_${i}`)).toMatchObject({ version: 1, value: crashValue(i) });
          } else if (tag === 'C') {
            expect(await store.getRecord('runs', `rec_${i}_a`)).toMatchObject({ version: 1, value: crashValue(i) });
            expect(await store.getRecord('runs', `rec_${i}_b`)).toMatchObject({ version: 1, value: crashValue(i + 1) });
          } else {
            expect(tag).toBe('E');
            const expected = crashEvents(i);
            const cs = cursorList.split(',');
            expect(cs).toHaveLength(expected.length);
            for (const [j, c] of cs.entries()) {
              expect(await store.getEvent(c)).toEqual({ ...expected[j], cursor: c });
              if (c > maxCursor) maxCursor = c;
            }
          }
        }

        // Whatever else landed (unacknowledged writes) is whole and consistent with the indexes.
        const records = (await store.listRecords<ReturnType<typeof crashValue>>('runs', { limit: 1000 })).items;
        const ids = new Set(records.map((r) => r.id));
        for (const r of records) {
          const m = /^rec_(\d+)(_b)?/.exec(r.id)!;
          expect(r.value).toEqual(crashValue(Number(m[1]) + (m[2] ? 1 : 0)));
          if (r.id.endsWith('_a')) expect(ids.has(r.id.replace(/_a$/, '_b'))).toBe(true);
          if (r.id.endsWith('_b')) expect(ids.has(r.id.replace(/_b$/, '_a'))).toBe(true);
        }
        expect(await store.countRecords('runs')).toBe(records.length);
        let bucketed = 0;
        for (const b of ['b0', 'b1', 'b2', 'b3', 'b4', 'b5', 'b6', 'pair']) {
          const n = await store.countRecords('runs', { name: 'bucket', value: b });
          expect((await store.listRecords('runs', { index: { name: 'bucket', value: b }, limit: 1000 })).items).toHaveLength(n);
          bucketed += n;
        }
        expect(bucketed).toBe(records.length);

        const events: StoredEvent[] = (await store.readEvents({ limit: 1000 })).events;
        for (const e of events) {
          const [, i, j] = /^ev_(\d+)_(\d+)$/.exec(e.event_id)!.map(Number);
          expect(e).toEqual({ ...crashEvents(i)[j], cursor: e.cursor });
        }
        let indexed = 0;
        for (let r = 0; r < 13; r++) indexed += (await store.readEvents({ filters: { run_id: `run_${r}` }, limit: 1000 })).events.length;
        expect(indexed).toBe(events.length);

        // Numbering continues after the crash.
        const [next] = await store.appendEvents(crashEvents(1));
        expect(next.cursor > maxCursor).toBe(true);
        const rec = await store.createRecord('runs', 'after_crash', {});
        expect(records.every((r) => r.seq < rec.seq)).toBe(true);
      } finally {
        await store.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
