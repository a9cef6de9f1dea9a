// Concurrency keys and priorities on the protocol routes (POST /ai-sdk/chat, /ag-ui, /a2a, /mcp,
// /v1/chat/completions). Their bodies belong to their protocols, so the flow-control fields ride
// in headers every one of them carries alike (docs/flow-control.md "Protocol routes"):
// `X-Agentd-Concurrency-Key` with `X-Agentd-Concurrency-Limit`, and `X-Agentd-Priority`. They mean
// what `concurrency` and `priority` mean on POST /run. A bad value is a 422 at `header.<name>`.
import type { FastifyRequest } from 'fastify';
import type { core } from 'zod';
import { z } from 'zod';
import { RequestValidationError } from '../errors.js';
import { ConcurrencySpec, RunPriority } from '../schemas/runs.js';
import type { StartOptions } from '../runtime/run-types.js';

export const FLOW_HEADERS = {
  key: 'x-agentd-concurrency-key',
  limit: 'x-agentd-concurrency-limit',
  priority: 'x-agentd-priority',
} as const;

const headerInt = z.coerce.number().int();

/** The flow-control options a protocol request names in its headers (none: an empty object, no work). */
export function flowOfHeaders(request: FastifyRequest): Pick<StartOptions, 'concurrency' | 'priority'> {
  const h = request.headers;
  const key = h[FLOW_HEADERS.key];
  const limit = h[FLOW_HEADERS.limit];
  const priority = h[FLOW_HEADERS.priority];
  if (key === undefined && limit === undefined && priority === undefined) return {};
  const out: Pick<StartOptions, 'concurrency' | 'priority'> = {};
  if (key !== undefined || limit !== undefined) {
    if (key === undefined) throw invalid(FLOW_HEADERS.key, 'required with ' + FLOW_HEADERS.limit, h);
    if (limit === undefined) throw invalid(FLOW_HEADERS.limit, 'required with ' + FLOW_HEADERS.key, h);
    const parsed = ConcurrencySpec.safeParse({ key, limit: headerInt.safeParse(limit).data ?? limit });
    if (!parsed.success) {
      const field = parsed.error.issues[0]?.path[0] === 'key' ? FLOW_HEADERS.key : FLOW_HEADERS.limit;
      throw invalid(field, parsed.error.issues[0]?.message ?? 'invalid', h);
    }
    out.concurrency = parsed.data;
  }
  if (priority !== undefined) {
    const parsed = RunPriority.safeParse(headerInt.safeParse(priority).data ?? priority);
    if (!parsed.success) throw invalid(FLOW_HEADERS.priority, parsed.error.issues[0]?.message ?? 'invalid', h);
    out.priority = parsed.data;
  }
  return out;
}

function invalid(header: string, message: string, headers: unknown): RequestValidationError {
  return new RequestValidationError('header', [{ code: 'custom', path: [header], message, input: undefined } as core.$ZodIssue], headers);
}
