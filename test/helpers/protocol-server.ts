// What the protocol adapter tests share (test/protocols/): API keys of every role, a governed
// agent whose `ledger_append` asks for approval (test/fixtures/run-tools.mjs counts its real calls
// in a ledger file), and the scripted model's default reply.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { tempDir } from './server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
export const ROLES = ['reader', 'operator', 'approver', 'admin'] as const;
export type Role = (typeof ROLES)[number];
export const KEYS: Record<Role, string> = { reader: 'key-reader-p', operator: 'key-operator-p', approver: 'key-approver-p', admin: 'key-admin-p' };
export const AUTH = { api_keys: ROLES.map((role) => ({ name: `${role}-key`, role, key_sha256: sha(KEYS[role]) })) };

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
/** The governed agent with auth off (every request anonymous). */
export const GOVERNED_OPEN = {
  agent: { tools: { local: TOOLS, builtin: [] } },
  governance: { rules: [{ tools: ['ledger_*'], effect: 'ask', reason: 'writes to the ledger' }] },
};
/** The governed agent behind the keys of every role. */
export const GOVERNED = { auth: AUTH, ...GOVERNED_OPEN };

/** A fresh ledger file for ledger_append (AGENTD_TEST_LEDGER) and a reader of its lines. */
export function useLedger(): { reset(): void; lines(): Array<{ entry: string; run_id: string }> } {
  const file = join(tempDir(), 'ledger.jsonl');
  process.env.AGENTD_TEST_LEDGER = file;
  return {
    reset: () => writeFileSync(file, ''),
    lines: () =>
      readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l)),
  };
}

/** The model answers a tool result with `saw: <result>`, anything else with `plain answer`. */
export function defaultReplies(model: ScriptedOpenAI): void {
  model.reset();
  model.setDefault((req) => {
    const last = req.messages.at(-1);
    return last?.role === 'tool' ? { text: `saw: ${String(last.content)}` } : { text: 'plain answer' };
  });
}
