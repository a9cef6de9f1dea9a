// A scripted model server plus an empty tool ledger file (the file the test tools in
// test/fixtures/run-tools.mjs and test/crash/fixtures/crash-tools.mjs append to, named by
// AGENTD_TEST_LEDGER), as the recovery, crash and snapshot-fixture tests start them.
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { killAllChildren, routeByTag, tempDir as crashTempDir, type TurnScript } from '../crash/harness.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { tempDir } from './server.js';

/** Starts the model and makes an empty ledger in a new temp dir, pushed on `dirs` for the caller to remove. */
export async function startModelWithLedger(dirs: string[], newDir: () => string = tempDir): Promise<{ model: ScriptedOpenAI; ledger: string }> {
  const model = await startScriptedOpenAI();
  const d = newDir();
  dirs.push(d);
  const ledger = join(d, 'ledger.jsonl');
  writeFileSync(ledger, '');
  return { model, ledger };
}

/** Closes the model and removes the temp dirs. */
export async function stopModelAndDirs(model: ScriptedOpenAI, dirs: string[]): Promise<void> {
  await model.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}

export interface CrashRig {
  /** Set in beforeAll. */
  readonly model: ScriptedOpenAI;
  readonly ledger: string;
  /** A new temp dir, removed after the file's tests. */
  dir(): string;
}

/**
 * For a test file that runs agentd in child processes (test/crash/harness.ts): registers the
 * beforeAll that starts the model, routed by the `[tag]` of each query to `scripts`, and the
 * afterAll that kills every child still alive, closes the model and removes the temp dirs.
 */
export function useCrashRig(scripts: Map<string, TurnScript>): CrashRig {
  const dirs: string[] = [];
  let started: { model: ScriptedOpenAI; ledger: string } | undefined;
  const get = () => {
    if (!started) throw new Error('the crash rig is started in beforeAll');
    return started;
  };
  beforeAll(async () => {
    started = await startModelWithLedger(dirs, crashTempDir);
    routeByTag(started.model, scripts);
  });
  afterAll(async () => {
    await killAllChildren();
    if (started) await stopModelAndDirs(started.model, dirs);
  });
  return {
    get model() {
      return get().model;
    },
    get ledger() {
      return get().ledger;
    },
    dir() {
      const d = crashTempDir();
      dirs.push(d);
      return d;
    },
  };
}
