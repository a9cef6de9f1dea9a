// The one registry of error codes, like Fastify's FST_ERR_*: every error that leaves the service
// carries an HTTP family (the body's `error`, from the spec) and a stable AGT_ERR_* code (the
// body's `code`) a client can branch on without reading the message. docs/errors.md lists every
// code; test/errors-doc.test.ts fails when the two drift apart.

/** The HTTP families of docs/contract.md §2: the body's `error`. */
export const ERROR_CODES = {
  BadRequest: { status: 400, retryable: false, description: 'The request could not be read (for example malformed JSON).' },
  Unauthorized: { status: 401, retryable: false, description: 'No valid API key was presented.' },
  Forbidden: { status: 403, retryable: false, description: "The API key's role does not allow this request." },
  NotFound: { status: 404, retryable: false, description: 'The named resource does not exist.' },
  MethodNotAllowed: { status: 405, retryable: false, description: 'The path exists, but not with this method (`Allow` lists the ones it has).' },
  RequestTimeout: {
    status: 408,
    retryable: true,
    description:
      'The request headers or body did not arrive within `server.headers_timeout_seconds` / `server.body_timeout_seconds`; the connection is closed.',
  },
  Conflict: { status: 409, retryable: false, description: 'The resource is not in a state that allows this request (already decided, exists, ended, ...).' },
  PayloadTooLarge: { status: 413, retryable: false, description: 'The body is larger than `server.max_body_bytes`.' },
  URITooLong: { status: 414, retryable: false, description: 'A path segment is longer than any id the API accepts (1,024 characters).' },
  UnsupportedMediaType: { status: 415, retryable: false, description: 'The body is not JSON.' },
  RequestHeaderFieldsTooLarge: {
    status: 431,
    retryable: false,
    description: "The request headers are larger than Node's limit (16 KiB); the connection is closed.",
  },
  TooManyRequests: { status: 429, retryable: true, description: 'Rate limited; retry after `Retry-After` seconds.' },
  InternalServerError: { status: 500, retryable: true, description: 'A bug. Never carries a stack trace or a credential.' },
  ServerBusy: {
    status: 503,
    retryable: true,
    description:
      'No run slot became free in time, the service is shutting down, or the database of its store does not answer (PostgreSQL); retry after `Retry-After` seconds.',
  },
  GatewayTimeout: { status: 504, retryable: true, description: 'The run did not finish within the request timeout; it goes on and can be inspected later.' },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

interface DomainErrorInfo {
  /** The family (the body's `error`); null for the shapes without one (422 `{detail}`, HttpErrorResponse). */
  readonly error: ErrorCode | null;
  readonly status: number;
  /** The message, `%s` filled in order by domainError's arguments. */
  readonly message: string;
}

const notFoundMessage = "%s '%s' was not found";

/**
 * Every AGT_ERR_* code. A code is never renamed or reused for another case (clients branch on
 * it); a new case gets a new code here and a row in docs/errors.md.
 */
export const DOMAIN_ERRORS = {
  // Request checks, before or around any route.
  AGT_ERR_VALIDATION: { error: null, status: 422, message: 'the request is invalid' },
  AGT_ERR_BAD_REQUEST: { error: 'BadRequest', status: 400, message: '%s' },
  AGT_ERR_BAD_HTTP: { error: 'BadRequest', status: 400, message: 'the request could not be read as HTTP/1.1' },
  AGT_ERR_BAD_URL: { error: 'BadRequest', status: 400, message: 'the path is not valid percent-encoded UTF-8' },
  AGT_ERR_HOST_NOT_ALLOWED: {
    error: 'BadRequest',
    status: 400,
    message: 'the Host header names a host this service does not answer to (server.allowed_hosts)',
  },
  AGT_ERR_UNAUTHORIZED: { error: 'Unauthorized', status: 401, message: 'send Authorization: Bearer <api key>' },
  AGT_ERR_API_KEY_INVALID: { error: 'Unauthorized', status: 401, message: 'the API key is not valid' },
  AGT_ERR_FORBIDDEN: { error: 'Forbidden', status: 403, message: "the '%s' role may not %s %s" },
  AGT_ERR_AGENT_SPEC_NEEDS_ADMIN: { error: 'Forbidden', status: 403, message: "the '%s' role may not register a spec with %s: it needs an admin key" },
  AGT_ERR_TENANT_ROUTE: { error: 'Forbidden', status: 403, message: 'a key acting in a tenant may not call %s %s' },
  AGT_ERR_TENANT_MISMATCH: { error: 'Forbidden', status: 403, message: "the key acts in tenant '%s' and may not act in '%s'" },
  AGT_ERR_TENANT_TOOLS_MODULE: {
    error: 'Forbidden',
    status: 403,
    message: "a key of tenant '%s' may not register a spec with %s: a tools module is code the service runs, so only a global admin key may",
  },
  AGT_ERR_TENANT_SHARED_AGENT: { error: 'Forbidden', status: 403, message: "background agent '%s' is shared by every tenant: only a global key may change it" },
  AGT_ERR_APPROVER_NOT_ALLOWED: { error: 'Forbidden', status: 403, message: "the key '%s' is not one of the approvers of approval '%s'" },
  AGT_ERR_APPROVER_MISMATCH: { error: 'Forbidden', status: 403, message: "approver '%s' does not match the API key '%s'" },
  AGT_ERR_ROUTE_NOT_FOUND: { error: 'NotFound', status: 404, message: 'no route %s %s' },
  AGT_ERR_METHOD_NOT_ALLOWED: { error: 'MethodNotAllowed', status: 405, message: '%s' },
  AGT_ERR_REQUEST_TIMEOUT: { error: 'RequestTimeout', status: 408, message: 'the request did not arrive in time' },
  AGT_ERR_PAYLOAD_TOO_LARGE: { error: 'PayloadTooLarge', status: 413, message: 'the request body is larger than the configured limit' },
  AGT_ERR_URI_TOO_LONG: { error: 'URITooLong', status: 414, message: 'a path segment is longer than any id the API accepts' },
  AGT_ERR_UNSUPPORTED_MEDIA_TYPE: { error: 'UnsupportedMediaType', status: 415, message: 'send the body as application/json' },
  AGT_ERR_HEADERS_TOO_LARGE: { error: 'RequestHeaderFieldsTooLarge', status: 431, message: 'the request headers are too large' },
  AGT_ERR_RATE_LIMITED: { error: 'TooManyRequests', status: 429, message: '%s' },
  AGT_ERR_TOO_MANY_CONNECTIONS: {
    error: 'TooManyRequests',
    status: 429,
    message: 'this client address already holds %s open connections, the most one address may hold; close one or retry later',
  },
  AGT_ERR_TOO_MANY_STREAMS: {
    error: 'TooManyRequests',
    status: 429,
    message: 'this client already holds %s open streams, the most one API key (or address, with auth off) may hold; close one or retry later',
  },
  AGT_ERR_INTERNAL: { error: 'InternalServerError', status: 500, message: 'an internal error occurred; it has been logged' },

  // A family's case without a more specific code (Fastify's own 4xx, the store's answers).
  AGT_ERR_NOT_FOUND: { error: 'NotFound', status: 404, message: '%s' },
  AGT_ERR_CONFLICT: { error: 'Conflict', status: 409, message: '%s' },
  AGT_ERR_SERVER_BUSY: { error: 'ServerBusy', status: 503, message: '%s' },
  AGT_ERR_TIMEOUT: { error: 'GatewayTimeout', status: 504, message: '%s' },

  // Resources that do not exist.
  AGT_ERR_RUN_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_SESSION_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_APPROVAL_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_AGENT_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_TRACE_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_IDEMPOTENT_RUN_GONE: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_BACKGROUND_AGENT_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_BACKGROUND_TASK_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_BACKGROUND_TASK_DISABLED: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_BACKGROUND_RUN_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_CHECKPOINT_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_EVAL_NOT_FOUND: { error: 'NotFound', status: 404, message: notFoundMessage },
  AGT_ERR_DASHBOARD_NOT_BUILT: { error: 'NotFound', status: 404, message: 'the dashboard is not built: run `npm run build`' },
  AGT_ERR_WORKSPACE_FILE_NOT_FOUND: { error: null, status: 404, message: '%s' },
  AGT_ERR_WORKSPACE_PATH_OUTSIDE: { error: null, status: 400, message: '%s' },

  // Interactive runs: approvals, budgets, steering, interrupts, sessions, recovery.
  AGT_ERR_SESSION_BUSY: { error: 'Conflict', status: 409, message: "session '%s' has a run in flight (%s)" },
  AGT_ERR_RUN_ENDED: { error: 'Conflict', status: 409, message: 'run %s already ended (%s)' },
  AGT_ERR_RUN_ENDED_BEFORE_DELIVERY: { error: 'Conflict', status: 409, message: 'run %s ended (%s) before the message could be delivered' },
  AGT_ERR_RUN_OWNED_ELSEWHERE: { error: 'Conflict', status: 409, message: 'run %s is running in another process (%s); %s' },
  AGT_ERR_RUN_NOT_STEERABLE: {
    error: 'Conflict',
    status: 409,
    message: 'run %s cannot be steered while %s; only running, awaiting_approval or interrupted runs can',
  },
  AGT_ERR_STEER_LIMIT: { error: 'Conflict', status: 409, message: 'run %s already has %s steer messages, the most one run accepts' },
  AGT_ERR_RUN_NOT_INTERRUPTIBLE: { error: 'Conflict', status: 409, message: 'run %s cannot be interrupted while %s; only running runs can' },
  AGT_ERR_RUN_IS_BACKGROUND: { error: 'Conflict', status: 409, message: "run %s is a background run's agent run; use POST /background/runs/{run_id}/%s" },
  AGT_ERR_DENY_WITH_ARGUMENTS: { error: 'Conflict', status: 409, message: 'arguments can only be given with an approval' },
  AGT_ERR_APPROVAL_EXPIRED: { error: 'Conflict', status: 409, message: 'approval %s expired at %s' },
  AGT_ERR_APPROVAL_ALREADY_DECIDED: { error: 'Conflict', status: 409, message: 'approval %s was already decided (%s)' },
  AGT_ERR_RUN_NOT_WAITING: { error: 'Conflict', status: 409, message: '%s is not waiting for %s (%s)' },
  AGT_ERR_BUDGET_REQUEST_MISMATCH: { error: 'Conflict', status: 409, message: 'budget request %s is not the pending one (%s)' },
  AGT_ERR_RUN_STILL_WAITING: { error: 'Conflict', status: 409, message: 'run %s is still waiting for a person (%s)' },
  AGT_ERR_RUN_ALREADY_LIVE: { error: 'Conflict', status: 409, message: 'run %s is already live in %s' },
  AGT_ERR_REPLAY_MODEL_UNAVAILABLE: { error: 'Conflict', status: 409, message: 'this server has no agent registry to build a replay model variant with' },
  AGT_ERR_EVAL_ENDED: { error: 'Conflict', status: 409, message: 'eval %s already ended (%s)' },
  AGT_ERR_CHECKPOINTS_OFF: {
    error: 'Conflict',
    status: 409,
    message: 'run %s keeps no checkpoints (it ran with runs.checkpoints: false); replay it from its start instead',
  },
  AGT_ERR_RUN_NO_SNAPSHOT: { error: 'Conflict', status: 409, message: 'run %s has no saved snapshot to resume from' },
  AGT_ERR_RUN_SAVED_BY_NEWER: {
    error: 'Conflict',
    status: 409,
    message: 'run %s was saved by a newer agentd (run machine v%s; this server knows up to v%s); resume it on an upgraded server',
  },
  AGT_ERR_RUN_RECOVERY_EXHAUSTED: { error: 'Conflict', status: 409, message: 'run %s was recovered too many times and is now failed' },
  AGT_ERR_RUN_TAKEN: { error: 'Conflict', status: 409, message: 'run %s was taken by another process' },
  AGT_ERR_AGENT_UNAVAILABLE: { error: 'Conflict', status: 409, message: "agent '%s' cannot be built: %s" },
  AGT_ERR_CONCURRENT_UPDATE: { error: 'Conflict', status: 409, message: '%s changed too often while this request was handled; retry' },
  AGT_ERR_IDEMPOTENCY_KEY_IN_FLIGHT: {
    error: 'Conflict',
    status: 409,
    message: 'a request with this Idempotency-Key is still being processed; retry shortly',
  },
  AGT_ERR_RUN_TIMEOUT: {
    error: 'GatewayTimeout',
    status: 504,
    message: 'run %s did not settle within the request timeout; it goes on and can be read at GET /runs/%s',
  },

  // Background agents, tasks and runs.
  AGT_ERR_BACKGROUND_AGENT_EXISTS: { error: 'Conflict', status: 409, message: "background agent '%s' is already registered" },
  AGT_ERR_SERVED_AGENT_RESERVED: {
    error: 'Conflict',
    status: 409,
    message: "'%s' is the served agent's id: the config defines that agent, so it is registered without a spec",
  },
  AGT_ERR_BACKGROUND_AGENT_IN_USE: { error: 'Conflict', status: 409, message: "background agent '%s' has %s run(s) in flight" },
  AGT_ERR_BACKGROUND_TASK_EXISTS: { error: 'Conflict', status: 409, message: "background task '%s' already exists" },
  AGT_ERR_BACKGROUND_RUN_ENDED: { error: 'Conflict', status: 409, message: 'background run %s already ended (%s)' },
  AGT_ERR_AGENT_RUN_UNDECIDED: { error: 'Conflict', status: 409, message: 'background run %s still waits for a decision on its agent run %s (%s)' },
  AGT_ERR_WORKSPACE_UNAVAILABLE: { error: 'Conflict', status: 409, message: "background task '%s' cannot have a workspace: %s" },
  AGT_ERR_BACKGROUND_UNAVAILABLE: { error: 'ServerBusy', status: 503, message: '%s' },
  AGT_ERR_RUN_WAIT_TIMEOUT: {
    error: null,
    status: 504,
    message: 'background run %s did not finish within the wait budget of %s s; it goes on and can be inspected at GET /background/runs/%s',
  },

  // Capacity and availability: retry after `Retry-After`.
  AGT_ERR_SHUTTING_DOWN: { error: 'ServerBusy', status: 503, message: 'the service is shutting down' },
  AGT_ERR_RUN_SLOTS_BUSY: { error: 'ServerBusy', status: 503, message: 'all %s run slots are busy; retry later' },
  AGT_ERR_RUN_QUEUE_FULL: { error: 'ServerBusy', status: 503, message: '%s runs wait for a concurrency key already (flow.max_queued); retry later' },
  AGT_ERR_MCP_PROCESS_LIMIT: {
    error: 'ServerBusy',
    status: 503,
    message: 'registered agents hold %s MCP server processes (agents.max_mcp_processes); no other may start now',
  },
  AGT_ERR_AGENT_REBUILDING: { error: 'ServerBusy', status: 503, message: "agent '%s' is being rebuilt; try again" },
  AGT_ERR_TOO_MANY_WATCHERS: { error: 'ServerBusy', status: 503, message: 'too many machine watchers; retry later' },
  AGT_ERR_STORE_UNAVAILABLE: { error: 'ServerBusy', status: 503, message: 'the store is unavailable (its database does not answer); retry' },
} as const satisfies Record<`AGT_ERR_${string}`, DomainErrorInfo>;

export type DomainCode = keyof typeof DOMAIN_ERRORS;

/** One argument per `%s` of a message template, so a missing or extra value is a type error. */
export type MessageArgs<S extends string> = S extends `${string}%s${infer Rest}` ? [string | number, ...MessageArgs<Rest>] : [];

export function formatMessage(template: string, args: readonly unknown[]): string {
  let i = 0;
  return template.replace(/%s/g, () => String(args[i++]));
}

/** The code of an AppError raised by family alone (src/runtime/runs.ts until it is ported). */
export const FAMILY_DEFAULT_CODE: Record<ErrorCode, DomainCode> = {
  BadRequest: 'AGT_ERR_BAD_REQUEST',
  Unauthorized: 'AGT_ERR_UNAUTHORIZED',
  Forbidden: 'AGT_ERR_FORBIDDEN',
  NotFound: 'AGT_ERR_NOT_FOUND',
  MethodNotAllowed: 'AGT_ERR_METHOD_NOT_ALLOWED',
  RequestTimeout: 'AGT_ERR_REQUEST_TIMEOUT',
  Conflict: 'AGT_ERR_CONFLICT',
  PayloadTooLarge: 'AGT_ERR_PAYLOAD_TOO_LARGE',
  URITooLong: 'AGT_ERR_URI_TOO_LONG',
  UnsupportedMediaType: 'AGT_ERR_UNSUPPORTED_MEDIA_TYPE',
  RequestHeaderFieldsTooLarge: 'AGT_ERR_HEADERS_TOO_LARGE',
  TooManyRequests: 'AGT_ERR_RATE_LIMITED',
  InternalServerError: 'AGT_ERR_INTERNAL',
  ServerBusy: 'AGT_ERR_SERVER_BUSY',
  GatewayTimeout: 'AGT_ERR_TIMEOUT',
};

/** The kinds of resource notFound() names, each with its code. */
export const NOT_FOUND_CODES = {
  run: 'AGT_ERR_RUN_NOT_FOUND',
  session: 'AGT_ERR_SESSION_NOT_FOUND',
  approval: 'AGT_ERR_APPROVAL_NOT_FOUND',
  agent: 'AGT_ERR_AGENT_NOT_FOUND',
  trace: 'AGT_ERR_TRACE_NOT_FOUND',
  'trace of run': 'AGT_ERR_TRACE_NOT_FOUND',
  'trace of session': 'AGT_ERR_TRACE_NOT_FOUND',
  'run of this Idempotency-Key': 'AGT_ERR_IDEMPOTENT_RUN_GONE',
  'background agent': 'AGT_ERR_BACKGROUND_AGENT_NOT_FOUND',
  'background task': 'AGT_ERR_BACKGROUND_TASK_NOT_FOUND',
  'enabled background task': 'AGT_ERR_BACKGROUND_TASK_DISABLED',
  'background run': 'AGT_ERR_BACKGROUND_RUN_NOT_FOUND',
  checkpoint: 'AGT_ERR_CHECKPOINT_NOT_FOUND',
  eval: 'AGT_ERR_EVAL_NOT_FOUND',
} as const satisfies Record<string, DomainCode>;
export type NotFoundKind = keyof typeof NOT_FOUND_CODES;
