/* eslint-disable no-restricted-syntax -- a tools module that does not load fails the agent build, which agent-registry.ts answers as AgentSpecError (422) or AGT_ERR_AGENT_UNAVAILABLE (409); at start-up the CLI prints it */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { TOOL_NAME_RE, type RegisteredTool, type ToolContext } from './types.js';
import { compileInputSchema, type ArgsValidator } from './schema.js';

export interface LoadedTool {
  tool: RegisteredTool;
  validator: ArgsValidator;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Loads an operator's tools module (decisions §10). Every problem is reported at start-up with the
 * file and the tool named, because a bad tool found mid-run would only confuse the model.
 */
export async function loadLocalTools(modulePath: string, cwd: string = process.cwd(), version?: string): Promise<LoadedTool[]> {
  const file = path.resolve(cwd, modulePath);
  let mod: { default?: unknown };
  try {
    // A version in the URL is a new module for the loader (import caches by URL): a registered
    // agent rebuilt after its module was edited gets the new code.
    const url = pathToFileURL(file).href + (version ? `?v=${encodeURIComponent(version)}` : '');
    mod = (await import(url)) as { default?: unknown };
  } catch (err) {
    throw new Error(`local tools module ${file} could not be loaded: ${err instanceof Error ? err.message : String(err)}`);
  }
  const list = mod.default;
  if (!Array.isArray(list)) throw new Error(`local tools module ${file}: the default export must be an array of tools`);
  const seen = new Set<string>();
  const out: LoadedTool[] = [];
  list.forEach((raw: unknown, i: number) => {
    const label = isPlainObject(raw) && typeof raw.name === 'string' ? `tool #${i} ('${raw.name}')` : `tool #${i}`;
    const fail = (why: string): never => {
      throw new Error(`local tools module ${file}: ${label}: ${why}`);
    };
    if (!isPlainObject(raw)) fail('must be an object');
    const t = raw as Record<string, unknown>;
    if (typeof t.name !== 'string' || !TOOL_NAME_RE.test(t.name)) fail('name must match ^[a-zA-Z0-9_-]{1,64}$');
    const name = t.name as string;
    if (seen.has(name)) fail(`duplicate tool name '${name}'`);
    if (typeof t.description !== 'string') fail('description must be a string');
    if (!isPlainObject(t.input_schema)) fail('input_schema must be a JSON Schema object');
    const schema = t.input_schema as Record<string, unknown>;
    // Model APIs only take object-shaped tool parameters.
    if (schema.type !== 'object') fail("input_schema must have type 'object'");
    if (t.idempotent !== undefined && typeof t.idempotent !== 'boolean') fail('idempotent must be a boolean when given');
    if (typeof t.execute !== 'function') fail('execute must be a function');
    let validator: ArgsValidator;
    try {
      validator = compileInputSchema(schema);
    } catch (err) {
      return fail(`input_schema is not a valid JSON Schema: ${err instanceof Error ? err.message : String(err)}`);
    }
    seen.add(name);
    const execute = t.execute as (args: Record<string, unknown>, ctx: ToolContext) => unknown;
    out.push({
      tool: {
        name,
        description: t.description as string,
        input_schema: schema,
        idempotent: t.idempotent === true,
        source: 'local',
        // Wrapping in an async function turns a synchronous throw into a rejection as well.
        execute: async (args, ctx) => execute.call(t, args, ctx),
      },
      validator,
    });
  });
  return out;
}
