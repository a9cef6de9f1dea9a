// What a run needs to know about the agent it runs as: the served agent (config `agent`) or a
// registered one (src/agent/agent-registry.ts). Types only, so the run service does not load the registry.
import type { ModelProvider } from './model/types.js';
import type { AgentToolSource } from './tools/types.js';
import type { Subagents } from './subagents.js';

export interface AgentProfile {
  /** The budgets' `agent` identity and the telemetry `agent_id`. */
  agent_id: string;
  agent_name: string;
  system_instruction: string | null;
  model: ModelProvider;
  tools: AgentToolSource;
  subagents?: Subagents;
  max_steps: number;
  max_output_tokens: number;
  /** Synchronous runs get `<this>/<session id>` as their workspace (null: none). */
  session_workspace_root: string | null;
}

/** An agent held for one run: `release` once the run is done with it (the agent may then be closed). */
export interface AgentLease {
  profile: AgentProfile;
  release(): void;
}

/** Where the run service gets a registered agent by id (null id: the served agent). */
export interface AgentSource {
  acquire(agentId: string): Promise<AgentLease>;
  /**
   * The model a replay's `model` variant names (src/runtime/debug/), checked exactly as a
   * registered agent's model_config is (agents.model_hosts, agents.secret_env): a 422 otherwise.
   */
  variantModel?(modelConfig: Record<string, unknown>): Promise<ModelProvider>;
}
