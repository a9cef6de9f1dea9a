import type { FastifyInstance } from 'fastify';
import { describeMachines } from '../runtime/machines-info.js';
import { MachinesResponse, ToolsResponse } from '../schemas/index.js';
import type { AppDeps } from './deps.js';
import { decide } from '../../machines/policies/governance.js';

export function serviceInfoRoutes(app: FastifyInstance, deps: AppDeps): void {
  app.get('/tools', { schema: { operationId: 'listTools', tags: ['service'], summary: 'The tools the agent can call', response: { 200: ToolsResponse } } }, async () => {
    const tools = deps.runtime.tools.list().map((t) => ({
      name: t.name, description: t.description, input_schema: t.input_schema, source: t.source,
      requires_approval: decide({ tool_name: t.name, mcp_server: t.mcp_server }, deps.config.governance as never).effect === 'ask',
    }));
    return { tools, total: tools.length };
  });
  app.get('/machines', { schema: { operationId: 'listMachines', tags: ['service'], summary: 'Every state machine: its XState JSON definition, states, transitions and a Mermaid diagram', response: { 200: MachinesResponse } } }, async () => ({ machines: describeMachines() }));
}
