// The served OpenAPI document against Redocly's recommended rules, and the
// promises behind them: an operationId and security on every operation, SSE answers documented as
// text/event-stream with their frames, the file download as bytes, each schema once.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROUTE_ACCESS } from '../../src/http/auth.js';
import { getJson, startTestServer, type TestServer } from '../helpers/server.js';

const run = promisify(execFile);
const REDOCLY = join(dirname(createRequire(import.meta.url).resolve('@redocly/cli/package.json')), 'bin', 'cli.js');

/**
 * Warnings docs/http-api.md ("OpenAPI document") justifies: the liveness and readiness probes and
 * the A2A agent card are public, take no input and always answer 200, so they have no 4xx answer to document.
 */
const JUSTIFIED_WARNINGS = [
  'operation-4xx-response #/paths/~1.well-known~1agent-card.json/get/responses',
  'operation-4xx-response #/paths/~1health/get/responses',
  'operation-4xx-response #/paths/~1ready/get/responses',
];

type Doc = { paths: Record<string, Record<string, any>>; components: { schemas: Record<string, any>; securitySchemes?: Record<string, unknown> } };

let open: TestServer;
let keyed: TestServer;
let doc: Doc;
let dir: string;

beforeAll(async () => {
  open = await startTestServer();
  keyed = await startTestServer({ auth: { api_keys: [{ name: 'ops', role: 'admin', key_sha256: 'a'.repeat(64) }] } });
  doc = (await getJson(`${open.url}/openapi.json`)).body;
  dir = mkdtempSync(join(tmpdir(), 'agentd-lint-'));
});

afterAll(async () => {
  await open?.stop();
  open?.cleanup();
  await keyed?.stop();
  keyed?.cleanup();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const operations = (): Array<{ key: string; method: string; path: string; op: any }> =>
  Object.entries(doc.paths).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, op]) => ({ key: `${method.toUpperCase()} ${path}`, method, path, op })),
  );

describe('the OpenAPI document', () => {
  it('passes redocly lint (recommended rules) with 0 errors and only the justified warnings', async () => {
    const file = join(dir, 'openapi.json');
    writeFileSync(file, JSON.stringify(doc));
    writeFileSync(join(dir, 'redocly.yaml'), 'extends:\n  - recommended\n');
    let stdout: string;
    try {
      ({ stdout } = await run(process.execPath, [REDOCLY, 'lint', file, '--format=json', '--max-problems=1000', `--config=${join(dir, 'redocly.yaml')}`], {
        cwd: dir,
        env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
        maxBuffer: 32 * 1024 * 1024,
      }));
    } catch (err) {
      stdout = (err as { stdout: string }).stdout; // exit code 1 when there are errors: report them below
    }
    const report = JSON.parse(stdout.slice(stdout.indexOf('{'))) as {
      problems: Array<{ ruleId: string; severity: string; message: string; location: Array<{ pointer: string }> }>;
    };
    const errors = report.problems.filter((p) => p.severity === 'error').map((p) => `${p.ruleId} ${p.location[0]?.pointer}: ${p.message}`);
    expect(errors).toEqual([]);
    const warnings = report.problems.filter((p) => p.severity === 'warn').map((p) => `${p.ruleId} ${p.location[0]?.pointer}`);
    expect(warnings.sort()).toEqual(JUSTIFIED_WARNINGS);
  });

  it('is the same with and without API keys configured', async () => {
    expect((await getJson(`${keyed.url}/openapi.json`)).body).toEqual(doc);
  });

  it('gives every operation a unique camelCase operationId', () => {
    const ids = operations().map((o) => o.op.operationId);
    for (const o of operations()) expect(o.op.operationId, o.key).toMatch(/^[a-z][A-Za-z0-9]+$/);
    expect(new Set(ids).size).toBe(ids.length);
    expect(doc.paths['/run'].post.operationId).toBe('startRun');
    expect(doc.paths['/runs'].get.operationId).toBe('listRuns');
    expect(doc.paths['/runs/{run_id}/approvals/{approval_id}'].post.operationId).toBe('decideApproval');
  });

  it('declares bearer security on every operation the auth table does not make public, and none on public ones', () => {
    expect(doc.components.securitySchemes?.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    const publicOps = new Set(
      Object.entries(ROUTE_ACCESS)
        .filter(([, a]) => a === 'public')
        .map(([k]) => k.replace(/:([A-Za-z_]+)/g, '{$1}')),
    );
    for (const o of operations()) {
      if (publicOps.has(o.key)) {
        expect(o.op.security, o.key).toEqual([]);
      } else {
        expect(o.op.security, o.key).toEqual([{ bearer: [] }]);
        expect(Object.keys(o.op.responses), o.key).toEqual(expect.arrayContaining(['401', '403']));
      }
    }
    expect(doc.paths['/runs/{run_id}/approvals/{approval_id}'].post['x-agentd-roles']).toEqual(['approver', 'admin']);
  });

  it('documents each stream as a 200 text/event-stream with its frames', () => {
    const frames = (path: string, method: string) => {
      const content = doc.paths[path][method].responses['200'].content;
      expect(Object.keys(content), path).toEqual(['text/event-stream']);
      return content['text/event-stream'].schema.anyOf.map(
        (v: any) => `${v.properties.event.const ?? v.properties.event.enum?.[0] ?? '*'}=${v.properties.data.$ref.split('/').pop()}`,
      );
    };
    expect(frames('/run', 'post')).toEqual([
      'session=RunStreamSessionFrame',
      'queued=RunStreamQueuedFrame',
      '*=TelemetryEvent',
      'delta=RunStreamDeltaFrame',
      'complete=RunResponse',
      'error=RunStreamErrorFrame',
    ]);
    for (const p of ['/telemetry/events/stream', '/events/{session_id}']) {
      expect(frames(p, 'get')).toEqual(['session=RunStreamSessionFrame', '*=TelemetryEvent', 'error=RunStreamErrorFrame']);
    }
  });

  it('documents the workspace file download as bytes under a named {path} parameter', () => {
    expect(doc.paths['/background/runs/{run_id}/workspace/files/{*}']).toBeUndefined();
    const op = doc.paths['/background/runs/{run_id}/workspace/files/{path}'].get;
    expect(op.parameters.map((p: any) => `${p.in}:${p.name}`)).toEqual(['path:run_id', 'path:path']);
    expect(op.responses['200'].content).toEqual({ 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } });
  });

  it('lists each schema once: an *Input twin only where the request form really differs', () => {
    const schemas = doc.components.schemas;
    const twins = Object.keys(schemas).filter((n) => n.endsWith('Input'));
    for (const n of twins) {
      const base = n.slice(0, -5);
      expect(schemas[base], n).toBeDefined();
      expect(JSON.stringify(schemas[n]), n).not.toBe(JSON.stringify(schemas[base]));
    }
    expect(twins.length).toBeLessThan(10);
    // Request-only schemas carry their plain name.
    expect(doc.paths['/run'].post.requestBody.content['application/json'].schema.$ref).toBe('#/components/schemas/RunRequest');
  });

  it("documents and serves each machine's XState JSON definition on /machines", async () => {
    const info = doc.components.schemas.MachineInfo;
    expect(info.required).toEqual(expect.arrayContaining(['definition', 'mermaid', 'transitions']));
    const res = await getJson(`${open.url}/machines`);
    expect(res.status).toBe(200);
    const run = res.body.machines.find((m: any) => m.id === 'run');
    expect(run.definition).toMatchObject({ id: 'run', key: 'run', type: 'compound' });
    expect(Object.keys(run.definition.states)).toEqual(expect.arrayContaining(run.states.filter((s: string) => !s.includes('.'))));
  });
});
