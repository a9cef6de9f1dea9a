// POST /mcp: the MCP server over streamable HTTP, stateless (no MCP session: each request gets its
// own server and transport, closed when the answer is written), answering JSON rather than SSE.
// GET and DELETE /mcp (a session's notification stream, a session's end) have nothing to serve.
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { domainError } from '../../errors.js';
import type { AppDeps, ZodApp } from '../../http/deps.js';
import { ErrorResponse, HTTPValidationError } from '../../schemas/index.js';
import { swallow } from '../../telemetry/swallowed.js';
import { buildMcpServer } from './server.js';

const JsonRpcMessage = z
  .looseObject({ jsonrpc: z.literal('2.0') })
  .meta({ id: 'McpJsonRpcMessage', description: 'An MCP JSON-RPC message (or a batch of them): initialize, tools/list, tools/call, …' });

export function mcpRoutes(app: ZodApp, deps: AppDeps): void {
  app.post(
    '/mcp',
    {
      schema: {
        operationId: 'mcp',
        tags: ['protocols'],
        summary: 'MCP server (streamable HTTP, stateless): tools run_agent, list_pending_approvals, decide_approval, decide_budget',
        // The MCP transport validates the JSON-RPC message itself and answers in its own error form.
        body: z.union([JsonRpcMessage, z.array(JsonRpcMessage).max(100)]),
        response: {
          200: JsonRpcMessage,
          202: z.null().describe('A notification or response was accepted.'),
          400: JsonRpcMessage,
          406: JsonRpcMessage,
          415: JsonRpcMessage,
          422: HTTPValidationError,
        },
      },
    },
    async (request, reply) => {
      const server = buildMcpServer(deps, request);
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      reply.hijack();
      reply.raw.on('close', () => {
        void transport.close().catch(swallow('mcp.transport_close'));
        void server.close().catch(swallow('mcp.server_close'));
      });
      await server.connect(transport);
      await transport.handleRequest(request.raw, reply.raw, request.body);
    },
  );

  for (const method of ['GET', 'DELETE'] as const) {
    app.route({
      method,
      url: '/mcp',
      schema: {
        // Not part of the API (docs/protocols/mcp.md says why): answered so MCP clients see the 405 the transport expects.
        hide: true,
        operationId: method === 'GET' ? 'mcpStream' : 'mcpEndSession',
        tags: ['protocols'],
        summary: 'Not served: the MCP server is stateless (no session, no server-to-client stream)',
        response: { 405: ErrorResponse },
      },
      handler: async () => {
        throw domainError('AGT_ERR_METHOD_NOT_ALLOWED', ['the MCP server is stateless: POST /mcp only'], { headers: { allow: 'POST' } });
      },
    });
  }
}
