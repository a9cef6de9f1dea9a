// How the OpenAPI document is shaped (GET /openapi.json), on top of @fastify/swagger and the zod
// type provider. Everything that makes it pass `redocly lint` (recommended rules) and gives the
// typed client (src/client) clean names lives here, so the route modules only declare what is
// theirs: an operationId, a summary, their zod schemas, and for the few answers that are not JSON
// (SSE streams, file bytes) a plain OpenAPI response built with sseResponse() / binaryResponse().
//
// - Security comes from the same table authorization uses (auth.ts ROUTE_ACCESS): public routes get
//   `security: []`, every other one `bearer` plus 401/403 answers and `x-agentd-roles`. It is
//   documented whether or not the running service has keys, so the document (and the client types
//   generated from it) is the same for every deployment.
// - The zod type provider emits every registered schema twice, as `X` (response direction) and
//   `XInput` (request direction). A pair whose two forms are identical becomes one `X`; an `XInput`
//   used alone becomes `X`; only schemas that really differ by direction (defaults make a field
//   optional in a request but always present in an answer) keep both. Unreferenced ones go.
// - Fastify's `*` wildcard (a workspace file path) is documented as a named `{path}` parameter.
import { STATUS_CODES } from 'node:http';
import type { SwaggerTransform, SwaggerTransformObject } from '@fastify/swagger';
import { jsonSchemaTransform, jsonSchemaTransformObject } from '@fastify/type-provider-zod';
import { z } from 'zod';
import { ErrorResponse } from '../schemas/index.js';
import { accessOf, rolesFor } from './auth.js';

type Json = Record<string, unknown>;
type OpenApiDoc = Json & { paths?: Record<string, Record<string, Json>>; components?: Json & { schemas?: Record<string, unknown> } };

const COMPONENTS = '#/components/schemas/';

/** `$ref` to the component of a zod schema registered with `.meta({ id })` (response direction). */
export function refTo(schema: z.ZodType): { $ref: string } {
  const id = z.globalRegistry.get(schema)?.id;
  // eslint-disable-next-line no-restricted-syntax -- a schema-definition bug, met while the OpenAPI document is built at start-up
  if (!id) throw new Error('refTo: the schema has no OpenAPI id (give it .meta({ id }))');
  return { $ref: `${COMPONENTS}${id}` };
}

/** One kind of frame of an SSE stream: the `event:` name (or any other name) and its `data:` JSON. */
export interface SseFrame {
  /** The `event:` field; omitted: any event name other than the named frames' (telemetry events). */
  event?: string;
  data: z.ZodType;
  /** The frame carries `id:` (the store cursor to send back as Last-Event-ID). */
  id?: boolean;
  description: string;
}

/**
 * A 200 answer that is an SSE stream. OpenAPI 3.1 has no notion of a frame, so the schema of the
 * `text/event-stream` content describes ONE frame: `{event, id?, data}`, an anyOf over the frame
 * kinds, `data` being the JSON the frame's `data:` line carries.
 */
export function sseResponse(description: string, frames: SseFrame[]): Json {
  const named = frames.filter((f) => f.event).map((f) => f.event!);
  const variants = frames.map((f) => ({
    type: 'object',
    description: f.description,
    properties: {
      event: f.event
        ? { type: 'string', const: f.event }
        : { type: 'string', not: { enum: named }, description: 'The telemetry event type (`event_type` of the data).' },
      ...(f.id ? { id: { type: 'string', description: 'Store cursor: send it back as Last-Event-ID to resume after this frame.' } } : {}),
      data: refTo(f.data),
    },
    required: f.id ? ['event', 'id', 'data'] : ['event', 'data'],
  }));
  return {
    description,
    content: { 'text/event-stream': { schema: { description: 'One frame of the stream (`event:`, `id:`, `data:` lines; `data` is JSON).', anyOf: variants } } },
  };
}

/**
 * A 200 answer that is an SSE stream of `data:` lines only (no `event:`), as the AI SDK's UI
 * message streams and AG-UI's event streams are: the schema describes one frame's `data` JSON.
 */
export function dataStreamResponse(description: string, data: z.ZodType, last?: string): Json {
  return {
    description,
    content: {
      'text/event-stream': {
        schema: {
          description: `One frame of the stream: a \`data:\` line of JSON.${last ? ` ${last}` : ''}`,
          type: 'object',
          properties: { data: refTo(data) },
          required: ['data'],
        },
      },
    },
  };
}

/** A 200 answer of raw bytes. */
export function binaryResponse(description: string): Json {
  return { description, content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } } };
}

const isZod = (s: unknown): s is z.ZodType => s instanceof z.ZodType;

/** Per-route transform: the type provider's, plus security, plain (non-JSON) answers and `{path}`. */
export const openApiRouteTransform: SwaggerTransform = (input) => {
  const { schema, route } = input as Parameters<SwaggerTransform>[0] & { schema?: Json & { response?: Record<string, unknown>; hide?: boolean } };
  if (!schema || schema.hide) return jsonSchemaTransform(input as never);
  const method = Array.isArray(route.method) ? route.method[0] : route.method;
  const access = accessOf(method, route.url);
  const zodAnswers: Record<string, unknown> = {};
  const plainAnswers: Record<string, unknown> = {};
  for (const [code, s] of Object.entries(schema.response ?? {})) (isZod(s) ? zodAnswers : plainAnswers)[code] = s;
  if (access !== 'public') {
    zodAnswers['401'] ??= ErrorResponse;
    zodAnswers['403'] ??= ErrorResponse;
  }
  const out = jsonSchemaTransform({ ...input, schema: { ...schema, response: zodAnswers } } as never) as {
    schema: Json & { response?: Record<string, unknown>; params?: Json };
    url: string;
  };
  const answers = { ...plainAnswers, ...(out.schema.response ?? {}) };
  out.schema.response = Object.fromEntries(Object.entries(answers).sort(([a], [b]) => a.localeCompare(b)));
  out.schema.security = access === 'public' ? [] : [{ bearer: [] }];
  if (access !== 'public') out.schema['x-agentd-roles'] = rolesFor(method, route.url);
  let url = out.url ?? input.url;
  if (url.endsWith('/*')) {
    // Fastify's wildcard keeps its route; the document names the parameter.
    url = `${url.slice(0, -1)}:path`;
    const params = out.schema.params as { properties?: Record<string, unknown>; required?: string[] } | undefined;
    if (params?.properties?.['*']) {
      const { '*': star, ...rest } = params.properties;
      params.properties = { ...rest, path: { ...(star as Json), description: 'Path of the file inside the workspace (may contain `/`).' } };
      params.required = (params.required ?? []).map((r) => (r === '*' ? 'path' : r));
    }
  }
  return { schema: out.schema, url } as never;
};

/** Document-level transform: the components (each schema once), servers, license, descriptions. */
export const openApiObjectTransform: SwaggerTransformObject = (input) => {
  const doc = jsonSchemaTransformObject(input) as OpenApiDoc;
  return finishDocument(doc) as never;
};

/** Pure post-processing of the whole document (exported for unit tests). */
export function finishDocument(doc: OpenApiDoc): OpenApiDoc {
  const schemas = { ...(doc.components?.schemas ?? {}) } as Record<string, unknown>;
  const inputNames = Object.keys(schemas).filter((n) => n.endsWith('Input') && schemas[n.slice(0, -5)] !== undefined);

  // Pairs whose forms are equal once their own refs to merged pairs are renamed: start from every
  // pair and drop those that differ until nothing changes (a pair may differ only through a ref).
  const merged = new Set(inputNames.map((n) => n.slice(0, -5)));
  for (let changed = true; changed;) {
    changed = false;
    for (const base of [...merged]) {
      const renamed = renameRefs(schemas[`${base}Input`], (name) => (name.endsWith('Input') && merged.has(name.slice(0, -5)) ? name.slice(0, -5) : name));
      if (JSON.stringify(renamed) !== JSON.stringify(schemas[base])) {
        merged.delete(base);
        changed = true;
      }
    }
  }
  const mergeName = (name: string) => (name.endsWith('Input') && merged.has(name.slice(0, -5)) ? name.slice(0, -5) : name);
  for (const base of merged) delete schemas[`${base}Input`];
  let out = renameRefs({ ...doc, components: { ...doc.components, schemas } }, mergeName) as OpenApiDoc;

  // Keep what the paths reach; then an `XInput` whose `X` is gone takes the plain name.
  const reached = reachable(out);
  const kept = Object.fromEntries(Object.entries(out.components!.schemas!).filter(([n]) => reached.has(n)));
  const plainName = (name: string) => (name.endsWith('Input') && kept[name] !== undefined && kept[name.slice(0, -5)] === undefined ? name.slice(0, -5) : name);
  const named: Array<[string, unknown]> = Object.entries(kept).map(([n, s]) => [plainName(n), s]);
  named.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)); // stable order: stable generated client types
  out = renameRefs({ ...out, components: { ...out.components, schemas: Object.fromEntries(named) } }, plainName) as OpenApiDoc;

  // Answers without a description of their own get the status's reason phrase.
  for (const methods of Object.values(out.paths ?? {})) {
    for (const op of Object.values(methods)) {
      for (const [code, answer] of Object.entries((op.responses ?? {}) as Record<string, Json>)) {
        if (answer.description !== 'Default Response') continue;
        answer.description =
          code === '401'
            ? 'No valid API key (only when the service has auth.api_keys configured).'
            : code === '403'
              ? "The API key's role may not call this operation."
              : (STATUS_CODES[Number(code)] ?? 'Answer');
      }
    }
  }
  return {
    ...out,
    info: { ...(out.info as Json), license: { name: 'MIT', identifier: 'MIT' } },
    servers: [{ url: '/', description: 'The agentd service that serves this document.' }],
  };
}

/** A copy of `value` with every `#/components/schemas/<name>` ref renamed. */
function renameRefs(value: unknown, rename: (name: string) => string): unknown {
  if (Array.isArray(value)) return value.map((v) => renameRefs(v, rename));
  if (value && typeof value === 'object') {
    const out: Json = {};
    for (const [k, v] of Object.entries(value)) {
      out[k] = k === '$ref' && typeof v === 'string' && v.startsWith(COMPONENTS) ? `${COMPONENTS}${rename(v.slice(COMPONENTS.length))}` : renameRefs(v, rename);
    }
    return out;
  }
  return value;
}

/** Names of the components the paths refer to, directly or through other components. */
function reachable(doc: OpenApiDoc): Set<string> {
  const seen = new Set<string>();
  const schemas = doc.components?.schemas ?? {};
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) for (const v of value) visit(v);
    else if (value && typeof value === 'object') {
      for (const [k, v] of Object.entries(value)) {
        if (k === '$ref' && typeof v === 'string' && v.startsWith(COMPONENTS)) {
          const name = v.slice(COMPONENTS.length);
          if (!seen.has(name)) {
            seen.add(name);
            visit(schemas[name]);
          }
        } else visit(v);
      }
    }
  };
  visit(doc.paths);
  return seen;
}
