// The client's one error (agentd/client re-exports it): every answer that is not a success, read
// from the service's three error shapes (docs/errors.md).
import type { components } from './openapi-types.js';

export type ValidationIssue = components['schemas']['ValidationError'];

/**
 * Any answer that is not a success, in one shape: `status` (HTTP), `code` (the service's error
 * code, e.g. NotFound, Conflict, ServerBusy; `ValidationError` for a 422; `HttpError` for a body in
 * no known shape), `message`, `detail` (ErrorResponse.detail, or the raw `detail` of other bodies)
 * and, for a 422, `validation`: where each problem is (`loc`) and what it is.
 */
export class AgentdError extends Error {
  override readonly name = 'AgentdError';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly detail: unknown = null,
    readonly validation: ValidationIssue[] | null = null,
    readonly body: unknown = null,
    readonly requestId: string | null = null,
    /** Seconds, from Retry-After (503 ServerBusy, 429). */
    readonly retryAfter: number | null = null,
  ) {
    super(message);
  }

  /** Builds the error from a non-2xx fetch Response (reads its body). */
  static async fromResponse(res: Response): Promise<AgentdError> {
    const text = await res.text().catch(() => '');
    let body: unknown = text;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: kept as text
    }
    const requestId = res.headers.get('x-request-id');
    const ra = Number(res.headers.get('retry-after'));
    const retryAfter = Number.isFinite(ra) && res.headers.has('retry-after') ? ra : null;
    const o = body && typeof body === 'object' ? (body as Record<string, unknown>) : null;
    if (o && typeof o.error === 'string' && typeof o.message === 'string') {
      return new AgentdError(res.status, o.error, o.message, o.detail ?? null, null, body, requestId, retryAfter);
    }
    if (o && Array.isArray(o.detail)) {
      const validation = o.detail as ValidationIssue[];
      const first = validation[0];
      const msg = first ? `${first.loc.join('.')}: ${first.msg}` : 'the request is invalid';
      return new AgentdError(res.status, 'ValidationError', msg, o.detail, validation, body, requestId, retryAfter);
    }
    if (o && 'detail' in o) {
      const d = o.detail;
      const msg =
        typeof d === 'string'
          ? d
          : d && typeof d === 'object' && typeof (d as { message?: unknown }).message === 'string'
            ? (d as { message: string }).message
            : `HTTP ${res.status}`;
      return new AgentdError(res.status, 'HttpError', msg, d, null, body, requestId, retryAfter);
    }
    return new AgentdError(res.status, 'HttpError', `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`, null, null, body, requestId, retryAfter);
  }
}
