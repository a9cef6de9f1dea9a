// The agents a protocol client may address: the served agent (`default`) and the registered ones
// (POST /background/agents). OpenAI-compatible `model` ids and the A2A card's skills come from here.
import type { AppDeps } from '../http/deps.js';

/** The id a protocol client uses for the served agent. */
export const SERVED_AGENT_ID = 'default';

/** At most this many agents are listed (a card or model list stays small whatever was registered). */
const MAX_LISTED = 200;

export interface ListedAgent {
  id: string;
  name: string;
  description: string;
  created_at: string | null;
}

/**
 * The agents a caller acting in `tenant` may run: the shared ones (registered by a global key) and,
 * for a tenant, its own (docs/multi-tenant.md). Without a tenant (the public A2A card, a global
 * key) only the shared ones: a tenant's agents are never listed outside it.
 */
export async function listedAgents(deps: AppDeps, tenant: string | null = null): Promise<ListedAgent[]> {
  const served: ListedAgent = {
    id: SERVED_AGENT_ID,
    name: deps.runtime.agentName,
    description: deps.config.agent.system_instruction ? firstLine(deps.config.agent.system_instruction) : `The served agent (${deps.runtime.agentName}).`,
    created_at: null,
  };
  const { agents } = await deps.runtime.background.agents.listAgents({ limit: MAX_LISTED }, { tenant, all: false });
  const registered = agents
    .filter((a) => a.agent_id !== SERVED_AGENT_ID && a.metadata?.served_agent !== true)
    .map((a) => ({
      id: a.agent_id,
      name: a.name ?? a.agent_id,
      description: a.system_instruction ? firstLine(a.system_instruction) : `Registered agent ${a.agent_id}.`,
      created_at: a.created_at,
    }));
  return [served, ...registered].slice(0, MAX_LISTED);
}

/** The run's agent_id for a protocol's agent id: none for the served agent. */
export function agentIdOf(id: string | null | undefined): string | null {
  return !id || id === SERVED_AGENT_ID ? null : id;
}

function firstLine(text: string): string {
  const line = text.split('\n')[0].trim();
  return line.length > 200 ? `${line.slice(0, 197)}...` : line;
}
