// The drain benchmark's CPU by thread role (test/bench/threads.ts) tells its roles apart in a
// process that has them all: this one, with the workspace writer and a LevelDB that compacted.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { afterAll, describe, expect, it } from 'vitest';
import { FolderWriter } from '../../src/background/folder-writer.js';
import { waitFor } from '../helpers/wait.js';
import { cpuByRole, threadSnapshot, type ThreadRole } from './threads.js';

describe.runIf(process.platform === 'linux' && process.arch === 'x64')('CPU by thread role', () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-threads-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('tells the main thread, the workspace writer, libuv, V8 and LevelDB compaction apart', async () => {
    const writer = new FolderWriter();
    // A 64 KB memtable: the writes below fill it many times, so LevelDB starts its compaction thread.
    const db = new ClassicLevel<string, string>(join(dir, 'db'), { writeBufferSize: 64 * 1024 });
    try {
      await writer.write(join(dir, 'ws'), '{"n":1}\n', '{}', true);
      for (let i = 0; i < 200; i++) await db.batch(Array.from({ length: 20 }, (_, j) => ({ type: 'put' as const, key: `k${i}-${j}`, value: 'x'.repeat(200) })));
      const before = threadSnapshot(process.pid);
      // A thread busy at a reading is told at the next one: wait until every role shows.
      const snap = await waitFor(
        () => {
          const s = threadSnapshot(process.pid);
          const count = (r: ThreadRole) => [...s.roles.values()].filter((x) => x === r).length;
          return count('main') === 1 && count('mirror') === 1 && count('leveldb') === 1 && count('libuv') >= 1 && count('v8') >= 2 ? s : null;
        },
        { what: 'every thread role told' },
      );
      expect(snap.roles.get(process.pid)).toBe('main');
      const cpu = cpuByRole(before, snap);
      const total = [...snap.cpu.values()].reduce((a, b) => a + b, 0) - [...before.cpu.values()].reduce((a, b) => a + b, 0);
      expect(Object.values(cpu).reduce((a, b) => a + b, 0)).toBeCloseTo(total, 6);
    } finally {
      await db.close();
      await writer.close();
    }
  });
});
