import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { McpToolError, McpUnavailableError, ToolRegistry } from '../../../src/agent/tools/index.js';
import { buildFixtureServer, type FixtureStats } from './fixture-server.js';
import { ctx, nextStatus } from './helpers.js';

/** A Streamable HTTP MCP server on 127.0.0.1, stateless: one McpServer per request, shared counters. */
class HttpFixture {
  server: Server | null = null;
  port = 0;
  readonly stats: FixtureStats = { slow_started: 0, slow_cancelled: 0, slow_finished: 0, calls: 0 };
  readonly seenHeaders: IncomingHttpHeaders[] = [];

  async start(port = 0): Promise<void> {
    const server = createServer((req, res) => {
      this.seenHeaders.push(req.headers);
      const mcp = buildFixtureServer(this.stats);
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      res.on('close', () => {
        void transport.close();
        void mcp.close();
      });
      mcp
        .connect(transport)
        .then(() => transport.handleRequest(req, res))
        .catch(() => {
          if (!res.headersSent) res.writeHead(500).end();
        });
    });
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/mcp`;
  }
}

describe('MCP over Streamable HTTP', () => {
  const fixture = new HttpFixture();
  let reg: ToolRegistry;

  beforeAll(async () => {
    await fixture.start();
    reg = await ToolRegistry.create(
      { mcp: [{ name: 'web', url: fixture.url, headers: { 'x-api-key': 'secret-1' } }] },
      { connectTimeoutMs: 5000, reconnectBaseMs: 50, reconnectMaxMs: 100, healthCheckMs: 0 },
    );
  });
  afterAll(async () => {
    await reg.close();
    await fixture.stop();
  });

  it('connects, lists prefixed tools and sends the configured headers', () => {
    expect(reg.mcpStatus()).toEqual({ web: { status: 'connected', last_error: null } });
    expect(reg.list().map((t) => t.name)).toEqual(['web__echo', 'web__add', 'web__fail', 'web__slow', 'web__stats', 'web__meta', 'web__grow']);
    expect(reg.get('web__add')).toMatchObject({ source: 'mcp', mcp_server: 'web', idempotent: true });
    expect(fixture.seenHeaders.length).toBeGreaterThan(0);
    expect(fixture.seenHeaders.every((h) => h['x-api-key'] === 'secret-1')).toBe(true);
  });

  it('calls tools', async () => {
    expect(await reg.get('web__echo')!.execute({ text: 'over http' }, ctx())).toBe('over http');
    expect(await reg.get('web__add')!.execute({ a: 40, b: 2 }, ctx())).toEqual({ sum: 42 });
    await expect(reg.get('web__fail')!.execute({}, ctx())).rejects.toBeInstanceOf(McpToolError);
    expect(fixture.stats.calls).toBe(2);
  });

  it('notices a server that went away on the next call, then reconnects when it is back', async () => {
    const port = fixture.port;
    await fixture.stop();
    const down = nextStatus(reg, 'web', 'disconnected');
    // the transport error is the caller's; the failed call makes the registry check the server
    await expect(reg.get('web__echo')!.execute({ text: 'x' }, ctx())).rejects.toThrow(/MCP server 'web', tool 'echo'/);
    const s = await down;
    expect(s.last_error).toContain('ping failed');
    expect(reg.mcpConnected()).toBe(false);
    await expect(reg.get('web__echo')!.execute({ text: 'x' }, ctx())).rejects.toBeInstanceOf(McpUnavailableError);
    const up = nextStatus(reg, 'web', 'connected', true);
    await fixture.start(port);
    await up;
    expect(reg.mcpConnected()).toBe(true);
    expect(await reg.get('web__echo')!.execute({ text: 'again' }, ctx())).toBe('again');
  });
});

describe('MCP over Streamable HTTP, health checks', () => {
  it('marks a silent server down by pinging, and fails fast when nothing listens', async () => {
    const fixture = new HttpFixture();
    await fixture.start();
    const reg = await ToolRegistry.create({ mcp: [{ name: 'web', url: fixture.url }] }, { healthCheckMs: 50, reconnectBaseMs: 60_000 });
    try {
      expect(reg.mcpConnected()).toBe(true);
      const down = nextStatus(reg, 'web', 'disconnected');
      await fixture.stop();
      expect((await down).last_error).toContain('ping failed');
      expect(reg.mcpStatus().web.status).toBe('disconnected');
    } finally {
      await reg.close();
    }
    const nobody = await ToolRegistry.create({ mcp: [{ name: 'nobody', url: fixture.url }] }, { reconnectBaseMs: 60_000 });
    try {
      expect(nobody.mcpStatus().nobody.status).toBe('failed');
      expect(nobody.mcpStatus().nobody.last_error).toBeTruthy();
    } finally {
      await nobody.close();
    }
  });
});
