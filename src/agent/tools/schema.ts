import { Ajv, type ErrorObject, type Options, type ValidateFunction } from 'ajv';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { Ajv2020 } from 'ajv/dist/2020.js';

// Tool schemas come from operators' modules and from arbitrary MCP servers, so the options lean to
// tolerance: unknown keywords and formats are ignored (strict: false) rather than refusing a tool,
// while every error is collected (allErrors) so the model can fix all of them in one retry.
const AJV_OPTIONS: Options = { allErrors: true, strict: false, useDefaults: true, validateFormats: false };

export type ArgsValidator = (args: Record<string, unknown>) => { ok: true; args: Record<string, unknown> } | { ok: false; errors: string[] };

type AjvInstance = Ajv | Ajv2019 | Ajv2020;
type Draft = 'draft-07' | '2019-09' | '2020-12';

function newAjv(draft: Draft): AjvInstance {
  return draft === '2020-12' ? new Ajv2020(AJV_OPTIONS) : draft === '2019-09' ? new Ajv2019(AJV_OPTIONS) : new Ajv(AJV_OPTIONS);
}

// An ajv instance costs tens of milliseconds to build (it compiles the meta-schemas), so one per
// draft is shared; compiled validators are cached by ajv itself.
const shared = new Map<Draft, AjvInstance>();

/** Compiles an input schema. Throws when the schema itself is invalid. */
export function compileInputSchema(schema: Record<string, unknown>): ArgsValidator {
  const { $schema, ...rest } = schema;
  const text = typeof $schema === 'string' ? $schema : '';
  // ajv refuses a `$schema` it has not loaded, so the draft picks the class and the key is dropped.
  const draft: Draft = text.includes('2020-12') ? '2020-12' : text.includes('2019-09') ? '2019-09' : 'draft-07';
  let ajv = shared.get(draft);
  if (!ajv) {
    ajv = newAjv(draft);
    shared.set(draft, ajv);
  }
  let validate: ValidateFunction;
  try {
    validate = ajv.compile(rest);
    // The validator keeps what it needs; dropping the schema from the instance frees it (tool lists
    // are compiled again after every MCP reconnect) and releases its `$id`.
    ajv.removeSchema(rest);
  } catch (err) {
    // Two servers (or two versions of one tool list) may reuse an `$id`, which one instance refuses.
    if (!(err instanceof Error && /already exists/.test(err.message))) throw err;
    validate = newAjv(draft).compile(rest);
  }
  return (args) => {
    // useDefaults writes into the object, so the caller's arguments (often saved in a snapshot) stay untouched.
    const copy = structuredClone(args);
    if (validate(copy)) return { ok: true, args: copy };
    return { ok: false, errors: describeErrors(validate.errors ?? []) };
  };
}

/**
 * For the built-in tools' schemas (fixed, ours, covered by tests): compiled on the first call
 * instead of at start-up. The first compile builds ajv's meta-schema validator, ~50 ms of CPU that
 * would otherwise be a tenth of start-up (a benchmark target) in every process, tools used or not.
 */
export function lazyInputSchema(schema: Record<string, unknown>): ArgsValidator {
  let compiled: ArgsValidator | null = null;
  return (args) => (compiled ??= compileInputSchema(schema))(args);
}

function where(instancePath: string): string {
  if (instancePath === '') return '';
  const parts = instancePath
    .split('/')
    .slice(1)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  let out = '';
  for (const p of parts) out += /^\d+$/.test(p) ? `[${p}]` : out === '' ? p : `.${p}`;
  return out;
}

function describeError(e: ErrorObject): string {
  const path = where(e.instancePath);
  const subject = path === '' ? 'arguments' : `'${path}'`;
  const params = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'required':
      return path === ''
        ? `missing required property '${String(params.missingProperty)}'`
        : `${subject} is missing required property '${String(params.missingProperty)}'`;
    case 'additionalProperties':
      return path === ''
        ? `unexpected property '${String(params.additionalProperty)}'`
        : `${subject} has unexpected property '${String(params.additionalProperty)}'`;
    case 'type':
      return `${subject} must be of type ${String(params.type).split(',').join(' or ')}`;
    case 'enum':
      return `${subject} must be one of ${JSON.stringify(params.allowedValues)}`;
    case 'const':
      return `${subject} must be ${JSON.stringify(params.allowedValue)}`;
    default:
      return `${subject} ${e.message ?? `fails '${e.keyword}'`}`;
  }
}

export function describeErrors(errors: ErrorObject[]): string[] {
  return [...new Set(errors.map(describeError))];
}

/** A compact, bounded rendering of a schema to remind the model of the expected shape. */
export function schemaHint(schema: Record<string, unknown>, maxChars = 1500): string {
  const text = JSON.stringify(schema);
  return text.length <= maxChars ? text : `${text.slice(0, maxChars)}…`;
}
