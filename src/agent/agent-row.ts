// A registered agent as stored (record kind `bg_agents`): read by the agent registry
// (src/agent/agent-registry.ts) and written by the background agents' service (src/background/agents.ts).
import type { BackgroundAgentSpec } from '../schemas/background.js';

/** kind `bg_agents`, id = agent id. */
export type AgentRow = BackgroundAgentSpec & {
  created_at: string;
  updated_at: string;
  /** Registered with an admin key (or with auth off): may use what needs one (docs/agents.md). Not answered. */
  admin_registered?: boolean;
};
