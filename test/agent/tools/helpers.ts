import type { McpServerStatus, ToolContext, ToolRegistry } from '../../../src/agent/tools/index.js';
import { waitFor } from '../../helpers/wait.js';

export function ctx(overrides: Partial<ToolContext> = {}): ToolContext {
  return {
    run_id: 'run_test',
    session_id: 'session_test',
    attempt: 1,
    lease_token: 'lease_1',
    idempotency_key: 'run_test:1:call_1',
    workspace_path: null,
    signal: new AbortController().signal,
    ...overrides,
  };
}

/** Resolves at the next status event of `server` that has `status` (or at once if it already has it and `now` is set). */
export function nextStatus(reg: ToolRegistry, server: string, status: McpServerStatus['status'], now = false): Promise<McpServerStatus> {
  if (now && reg.mcpStatus()[server]?.status === status) return Promise.resolve(reg.mcpStatus()[server]);
  return new Promise((resolve) => {
    const off = reg.onMcpStatus((name, s) => {
      if (name === server && s.status === status) {
        off();
        resolve(s);
      }
    });
  });
}

/** Polls an async probe until it returns true (for state held in another process): waitFor. */
export async function until(probe: () => Promise<boolean>, what: string): Promise<void> {
  await waitFor(probe, { what, intervalMs: 20 });
}
