import { describeMachines } from '../runtime/machines-info.js';
import {
  ErrorResponse,
  HTTPValidationError,
  LiveStateFrame,
  LiveWatchFrame,
  MachineLiveQuery,
  MachinesResponse,
  ToolsResponse,
  WhoAmIResponse,
} from '../schemas/index.js';
import { domainError } from '../errors.js';
import { MAX_WATCHERS, type LiveState } from '../runtime/live-states.js';
import { sseResponse } from './openapi.js';
import { SseChannel, streamOptions } from './sse.js';
import type { AppDeps, ZodApp } from './deps.js';
import { decide } from '../../machines/policies/governance.js';

export function serviceInfoRoutes(app: ZodApp, deps: AppDeps): void {
  // Who the caller is: the dashboard's header and the default approver of the dashboard and the
  // CLI (the key's name, as steer messages use). Any valid key may ask about itself.
  app.get(
    '/whoami',
    {
      schema: {
        operationId: 'whoAmI',
        tags: ['service'],
        summary: 'The API key this request was made with: its name, role and tenant',
        response: { 200: WhoAmIResponse, 401: ErrorResponse },
      },
    },
    async (request) => {
      const auth = (deps.config.auth?.api_keys ?? []).length > 0;
      return { name: request.apiKeyName ?? null, role: request.apiKeyRole ?? 'admin', auth, tenant: request.tenantScope.tenant };
    },
  );
  app.get(
    '/tools',
    { schema: { operationId: 'listTools', tags: ['service'], summary: 'The tools the agent can call', response: { 200: ToolsResponse } } },
    async () => {
      const tools = deps.runtime.tools.list().map((t) => ({
        name: t.name,
        description: t.description,
        input_schema: t.input_schema,
        source: t.source,
        requires_approval: decide({ tool_name: t.name, mcp_server: t.mcp_server }, deps.config.governance as never).effect === 'ask',
      }));
      return { tools, total: tools.length };
    },
  );
  app.get(
    '/machines',
    {
      schema: {
        operationId: 'listMachines',
        tags: ['service'],
        summary: 'Every state machine: its XState JSON definition, states, transitions and a Mermaid diagram',
        response: { 200: MachinesResponse },
      },
    },
    async () => ({ machines: describeMachines() }),
  );

  // The actor system's inspection events for one actor, as it moves: what the dashboard's machine
  // view highlights. Only actors live in this process have states to send; a run paused for a
  // person has no actor (its record says where it stands) until a decision resumes it.
  app.get(
    '/machines/live',
    {
      sse: { kind: 'manual', heartbeat: false },
      exposeHeadRoute: false,
      schema: {
        operationId: 'watchMachine',
        tags: ['service'],
        summary: "Follow one actor's machine state live (SSE, from the actor system's inspection events)",
        querystring: MachineLiveQuery,
        response: {
          200: LIVE_STREAM,
          422: HTTPValidationError,
          429: ErrorResponse,
          503: ErrorResponse,
        },
      },
    },
    async (request, reply) => {
      const { actor } = request.query;
      const live = deps.runtime.liveStates;
      if (live.size >= MAX_WATCHERS) throw domainError('AGT_ERR_TOO_MANY_WATCHERS', [], { headers: { 'retry-after': '5' } });
      const channel = new SseChannel(reply, streamOptions(deps));
      const current = live.current(actor);
      channel.push({ event: 'watch', data: { actor, live: current !== null } });
      if (current) channel.push({ event: 'state', data: current });
      const unwatch = live.watch(actor, (state: LiveState) => {
        channel.push({ event: 'state', data: state });
        if (state.status !== 'active') channel.close();
      });
      const untrack = deps.runtime.trackStream(() => channel.close());
      channel.onClientClose(() => unwatch());
      channel.onDropped(() => unwatch());
      try {
        await channel.run();
      } finally {
        unwatch();
        untrack();
      }
    },
  );
}

const LIVE_STREAM = sseResponse(
  'SSE: `watch` (is the actor live here?), then a `state` frame for its current state and each new one; the stream ends when the actor stops.',
  [
    { event: 'watch', data: LiveWatchFrame, description: 'First frame.' },
    { event: 'state', data: LiveStateFrame, description: "The actor's state, at once when it is live and after every transition." },
  ],
);
