// CPU of a process's threads by role, from /proc. Node names every thread `node`, so a role is
// told by what the thread waits on when idle (/proc/<pid>/task/<tid>/syscall: futex, and the
// address of the condition variable): libuv's pool waits on one in node's static data (libuv is
// linked into node), V8's platform workers (GC helpers, concurrent JIT) on one queue's on the heap,
// LevelDB's compaction thread alone on its environment's on the heap. The workspace mirror's
// writer names itself (src/background/folder-writer.ts). Linux on x86-64 only.
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { FOLDER_WRITER_THREAD } from '../../src/background/folder-writer.js';

export const THREAD_ROLES = ['main', 'mirror', 'v8', 'libuv', 'leveldb', 'other'] as const;
export type ThreadRole = (typeof THREAD_ROLES)[number];
/** What each role is, for a row's text. */
export const ROLE_LABELS: Record<ThreadRole, string> = {
  main: 'main thread',
  mirror: 'workspace writer',
  v8: "V8's platform workers (GC, JIT)",
  libuv: "libuv's pool (LevelDB writes, reads, fsyncs)",
  leveldb: 'LevelDB compaction',
  other: 'other',
};

const CLK_TCK = 100; // USER_HZ on Linux
const FUTEX = '202'; // x86-64

/** One reading: CPU ms per thread, and the role of each thread that could be told. */
export interface ThreadSnapshot {
  cpu: Map<number, number>;
  roles: Map<number, ThreadRole>;
}

function read(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return null; // the thread ended meanwhile
  }
}

/**
 * Address ranges of the mappings of the files whose path passes `test`, each with the anonymous
 * mapping right after it (a binary's zero-filled static data, .bss, where libuv's and LevelDB's
 * condition variables are).
 */
function ranges(pid: number, test: (file: string) => boolean): Array<[bigint, bigint]> {
  const out: Array<[bigint, bigint]> = [];
  let prevEnd = -1n;
  let prevOwned = false;
  for (const line of (read(`/proc/${pid}/maps`) ?? '').split('\n')) {
    if (!line) continue;
    const [span, , , , , file] = line.split(/\s+/);
    const [lo, hi] = span.split('-').map((x) => BigInt(`0x${x}`));
    const owned: boolean = file ? test(file) : prevOwned && lo === prevEnd;
    if (owned) out.push([lo, hi]);
    prevOwned = owned && Boolean(file);
    prevEnd = hi;
  }
  return out;
}

export function threadSnapshot(pid: number): ThreadSnapshot {
  const cpu = new Map<number, number>();
  const roles = new Map<number, ThreadRole>();
  let exe = '';
  try {
    exe = readlinkSync(`/proc/${pid}/exe`);
  } catch {
    // gone
  }
  const inNode = ranges(pid, (f) => f === exe);
  const within = (a: bigint, rs: Array<[bigint, bigint]>) => rs.some(([lo, hi]) => a >= lo && a < hi);
  /** Heap waiters by the 64 bytes their condition variable is in (one variable's waiters may wait on two of its words). */
  const heapWaits = new Map<bigint, number[]>();
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    const tid = Number(t);
    const stat = read(`/proc/${pid}/task/${t}/stat`);
    if (!stat) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    cpu.set(tid, ((Number(fields[11]) + Number(fields[12])) / CLK_TCK) * 1000);
    if (tid === pid) roles.set(tid, 'main');
    else if (read(`/proc/${pid}/task/${t}/comm`)?.trim() === FOLDER_WRITER_THREAD) roles.set(tid, 'mirror');
    else {
      const [nr, addr] = (read(`/proc/${pid}/task/${t}/syscall`) ?? '').trim().split(' ');
      if (nr !== FUTEX || !addr) continue; // busy now (or another wait): told at another reading
      const a = BigInt(addr);
      if (within(a, inNode)) roles.set(tid, 'libuv');
      else heapWaits.set(a / 64n, [...(heapWaits.get(a / 64n) ?? []), tid]);
    }
  }
  for (const tids of heapWaits.values()) for (const tid of tids) roles.set(tid, tids.length > 1 ? 'v8' : 'leveldb');
  return { cpu, roles };
}

/** CPU ms per role between two readings; a thread told at neither counts as `other`. */
export function cpuByRole(before: ThreadSnapshot, after: ThreadSnapshot): Record<ThreadRole, number> {
  const out = Object.fromEntries(THREAD_ROLES.map((r) => [r, 0])) as Record<ThreadRole, number>;
  for (const [tid, ms] of after.cpu) {
    const role = after.roles.get(tid) ?? before.roles.get(tid) ?? 'other';
    out[role] += ms - (before.cpu.get(tid) ?? 0);
  }
  return out;
}
