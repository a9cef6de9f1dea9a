// Several agentd CHILD processes on one private PostgreSQL database: each
// instance has its own data dir (logs, nothing shared) and the same database, workspace_root and
// tool ledger file, as a real deployment would have them.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { crashConfig, startAgentd, tempDir, writeConfig, type AgentdChild } from '../crash/harness.js';

export interface Cluster {
  db: TestDatabase;
  dir: string;
  /** The tools' ledger file (test/crash/fixtures/crash-tools.mjs): one line per tool execution phase. */
  ledger: string;
  configFile: string;
  instances: AgentdChild[];
  /** Starts one more instance (or again in slot `i`). */
  start(i?: number): Promise<AgentdChild>;
  /** Stops every instance (SIGKILL) and drops the database. */
  destroy(): Promise<void>;
}

/** Fast leases and sweeps, so a dead instance's runs are recovered in seconds. */
export const FAST_RECOVERY = {
  runs: { lease_seconds: 2, orphan_sweep: { interval_seconds: 1, decided_grace_seconds: 1 } },
  background: { lease_seconds: 2, poll_interval_ms: 100 },
};

export async function startCluster(n: number, modelUrl: string, extra: Record<string, unknown> = {}): Promise<Cluster> {
  const db = await createTestDatabase('agentd_cluster');
  const dir = tempDir('agentd-cluster-');
  const ledger = join(dir, 'ledger.jsonl');
  writeFileSync(ledger, '');
  const workspaces = join(dir, 'workspaces');
  mkdirSync(workspaces, { recursive: true });
  const { background, runs, ...rest } = extra as { background?: Record<string, unknown>; runs?: Record<string, unknown> };
  const configFile = writeConfig(
    dir,
    crashConfig(modelUrl, {
      ...rest,
      store: { kind: 'postgres', url: db.url },
      runs: { ...FAST_RECOVERY.runs, ...(runs ?? {}) },
      background: { ...FAST_RECOVERY.background, workspace_root: workspaces, ...(background ?? {}) },
    }),
  );
  const instances: AgentdChild[] = [];
  const start = async (i = instances.length): Promise<AgentdChild> => {
    const dataDir = join(dir, `data-${i}`);
    const child = await startAgentd({ configFile, dataDir, env: { AGENTD_TEST_LEDGER: ledger } });
    instances[i] = child;
    return child;
  };
  // Started one after the other: the first applies the migrations (the others would wait on its lock anyway).
  try {
    for (let i = 0; i < n; i++) await start(i);
  } catch (err) {
    await Promise.all(instances.map((c) => c?.kill('SIGKILL')));
    await db.drop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    db,
    dir,
    ledger,
    configFile,
    instances,
    start,
    async destroy() {
      await Promise.all(instances.map((c) => c?.kill('SIGKILL')));
      await db.drop().catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
