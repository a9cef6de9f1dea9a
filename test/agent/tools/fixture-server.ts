import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';

/** Counters a test can read through the `stats` tool (the server runs in another process). */
export interface FixtureStats {
  slow_started: number;
  slow_cancelled: number;
  slow_finished: number;
  calls: number;
}

/**
 * The MCP server used by the tools tests, over stdio (test/fixtures/mcp-stdio-server.ts) and over
 * Streamable HTTP (in-process). `stats` is shared so an HTTP test can see every request's server.
 */
export function buildFixtureServer(stats: FixtureStats = { slow_started: 0, slow_cancelled: 0, slow_finished: 0, calls: 0 }): McpServer {
  const server = new McpServer({ name: 'agentd-fixture', version: '1.0.0' });
  let grown = false;
  server.registerTool(
    'echo',
    { description: 'Echo the text back', inputSchema: { text: z.string() }, annotations: { readOnlyHint: true } },
    async ({ text }) => {
      stats.calls += 1;
      return { content: [{ type: 'text', text }] };
    },
  );
  server.registerTool(
    'add',
    { description: 'Add two numbers', inputSchema: { a: z.number(), b: z.number() }, outputSchema: { sum: z.number() }, annotations: { idempotentHint: true } },
    async ({ a, b }) => {
      stats.calls += 1;
      return { content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } };
    },
  );
  server.registerTool('fail', { description: 'Always reports an error', inputSchema: { reason: z.string().optional() } }, async ({ reason }) => ({
    isError: true,
    content: [{ type: 'text', text: `fixture failure: ${reason ?? 'no reason'}` }],
  }));
  server.registerTool(
    'slow',
    { description: 'Wait ms milliseconds; stops early when the call is cancelled', inputSchema: { ms: z.number().int().min(0) } },
    async ({ ms }, extra) => {
      stats.slow_started += 1;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          stats.slow_finished += 1;
          resolve();
        }, ms);
        extra.signal.addEventListener(
          'abort',
          () => {
            clearTimeout(timer);
            stats.slow_cancelled += 1;
            resolve();
          },
          { once: true },
        );
      });
      return { content: [{ type: 'text', text: extra.signal.aborted ? 'cancelled' : `waited ${ms} ms` }] };
    },
  );
  server.registerTool('stats', { description: 'Counters of this server process', inputSchema: {}, annotations: { readOnlyHint: true } }, async () => ({
    content: [{ type: 'text', text: JSON.stringify({ ...stats, pid: process.pid }) }],
  }));
  server.registerTool('meta', { description: 'Returns the request _meta it received', inputSchema: {} }, async (_args, extra) => ({
    content: [{ type: 'text', text: JSON.stringify(extra._meta ?? {}) }],
  }));
  server.registerTool('grow', { description: 'Adds a tool named extra (the server then announces a changed tool list)', inputSchema: {} }, async () => {
    if (!grown) {
      grown = true;
      server.registerTool('extra', { description: 'Appeared at run time', inputSchema: {} }, async () => ({ content: [{ type: 'text', text: 'extra' }] }));
    }
    return { content: [{ type: 'text', text: 'grown' }] };
  });
  return server;
}
