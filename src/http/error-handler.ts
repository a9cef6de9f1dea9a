import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, DOMAIN_ERRORS, ERROR_CODES, HttpDetailError, type DomainCode, type ErrorCode } from '../errors.js';
import { FAMILY_DEFAULT_CODE, formatMessage } from '../error-codes.js';
import { isStoreError } from '../store/store.js';
import { zodIssuesToDetail } from '../schemas/index.js';
import { HttpValidationFailure, RequestValidationError } from './validation.js';

/** One line about a 5xx: written whatever the request-log setting, so no server error goes unseen. */
export interface ServerErrorEntry {
  level: 'error';
  msg: string;
  request_id: string;
  method: string;
  route: string | null;
  status: number;
  error: { name: string; message: string; code?: string; stack?: string };
}
/** `request`: the request that failed, whose logger carries its id (`reqId`). */
export type ServerErrorLog = (entry: ServerErrorEntry, request: FastifyRequest) => void;

/**
 * The default sink: the process's logger, through the request's child logger (so the line has
 * `reqId`), at `error`, which every allowed AGENTD_LOG_LEVEL writes. Not tied to request logging.
 */
export const logServerErrorToRequestLog: ServerErrorLog = (entry, request) => {
  const { level: _level, msg, request_id: _id, ...fields } = entry;
  // The process logger with the request's id bound here: without request logging, requests get
  // no child logger of their own (see childLoggerFactory in src/app.ts).
  request.server.log.child({ reqId: request.id }).error(fields, msg);
};

/** The registered family for a 4xx status that Fastify or Node produced, so the body names it. */
function codeForStatus(status: number): ErrorCode {
  for (const [code, info] of Object.entries(ERROR_CODES)) if (info.status === status) return code as ErrorCode;
  return 'BadRequest';
}

/** A body for a 4xx that Fastify raised without one of our codes: the family's generic code. */
function familyBody(status: number, message: string) {
  const error = codeForStatus(status);
  return { error, code: FAMILY_DEFAULT_CODE[error], message, detail: null };
}

type ValidationItem = { loc: Array<string | number>; msg: string; type: string; ctx?: Record<string, unknown>; input?: unknown };

/** Rewrites the server's own file system paths in a message (src/http/server-paths.ts). */
export type PathScrubber = (text: string) => string;

function validationReply(reply: FastifyReply, detail: ValidationItem[], scrub: PathScrubber) {
  const shown = detail.map((d) => ({ ...d, msg: scrub(d.msg) }));
  return reply.status(422).send({ detail: shown, code: 'AGT_ERR_VALIDATION' satisfies DomainCode });
}

/** An ErrorResponse body for a registered code with a fixed message (or `message` for the generic ones). */
export function errorBody(code: DomainCode, ...args: Array<string | number>): { error: ErrorCode; code: DomainCode; message: string; detail: null } {
  const info = DOMAIN_ERRORS[code];
  return { error: info.error ?? 'BadRequest', code, message: formatMessage(info.message, args), detail: null };
}

/**
 * Every error leaves in a documented shape (docs/contract.md §2): 422 HTTPValidationError for bad
 * input, `{detail}` for the routes whose spec answer is HttpErrorResponse, ErrorResponse for the
 * rest. Nothing else: no stack trace, no internal message of an unexpected error, no server path
 * (`scrub`: a message may quote one, e.g. a tools module that failed to load).
 */
export function installErrorHandling(app: FastifyInstance, logServerError: ServerErrorLog = logServerErrorToRequestLog, scrub: PathScrubber = (t) => t): void {
  app.setErrorHandler((err: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof RequestValidationError) {
      return validationReply(reply, zodIssuesToDetail(err.issues, err.part, err.data), scrub);
    }
    if (err instanceof HttpValidationFailure) {
      return validationReply(reply, err.detail, scrub);
    }
    if (err instanceof AppError) {
      for (const [k, v] of Object.entries(err.headers)) reply.header(k, v);
      const body = err.toBody();
      return reply.status(err.status).send({ ...body, message: scrub(body.message), detail: body.detail === null ? null : scrub(body.detail) });
    }
    if (err instanceof HttpDetailError) {
      return reply.status(err.status).send({ detail: typeof err.detail === 'string' ? scrub(err.detail) : err.detail, code: err.domainCode });
    }
    if (isStoreError(err, 'not_found')) {
      return reply.status(404).send(errorBody('AGT_ERR_NOT_FOUND', err.message));
    }
    if (isStoreError(err, 'stale_version') || isStoreError(err, 'conflict')) {
      return reply.status(409).send(errorBody('AGT_ERR_CONCURRENT_UPDATE', 'the resource'));
    }
    if (isStoreError(err, 'unavailable')) {
      // The database does not answer (PostgreSQL); /ready says so too. Transient: retry.
      reply.header('retry-after', '1');
      return reply.status(503).send(errorBody('AGT_ERR_STORE_UNAVAILABLE'));
    }
    const code = (err as FastifyError).code;
    const status = (err as FastifyError).statusCode;
    // Fastify's own client errors: map each to our shapes.
    if (code === 'FST_ERR_CTP_INVALID_JSON_BODY' || code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || (err instanceof SyntaxError && status === 400)) {
      return validationReply(
        reply,
        [
          {
            loc: ['body'],
            msg: `JSON decode error: ${code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'the body is empty' : 'the body is not valid JSON'}`,
            type: 'json_invalid',
          },
        ],
        scrub,
      );
    }
    if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      return reply.status(413).send(errorBody('AGT_ERR_PAYLOAD_TOO_LARGE'));
    }
    if (code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' || code === 'FST_ERR_CTP_INVALID_CONTENT_LENGTH') {
      return reply.status(415).send(errorBody('AGT_ERR_UNSUPPORTED_MEDIA_TYPE'));
    }
    if (code === 'FST_ERR_NOT_FOUND') {
      return reply.status(404).send(errorBody('AGT_ERR_ROUTE_NOT_FOUND', request.method, request.url.split('?')[0]));
    }
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return reply.status(status).send(familyBody(status, err.message));
    }
    const e = err as Error & { code?: string };
    logServerError(
      {
        level: 'error',
        msg: 'unhandled error',
        request_id: String(request.id),
        method: request.method,
        route: request.is404 ? null : (request.routeOptions.url ?? null),
        status: 500,
        error: { name: e?.name ?? 'Error', message: String(e?.message ?? e), code: typeof e?.code === 'string' ? e.code : undefined, stack: e?.stack },
      },
      request,
    );
    return reply.status(500).send(errorBody('AGT_ERR_INTERNAL'));
  });

  app.setNotFoundHandler((request, reply) => {
    reply.status(404).send(errorBody('AGT_ERR_ROUTE_NOT_FOUND', request.method, request.url.split('?')[0]));
  });
}

/**
 * Fastify's `frameworkErrors`: the router's own failures, raised before a route matched (so the
 * error handler does not see them), in the ErrorResponse shape.
 */
export function frameworkErrorReply(err: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    void reply.status(414).send(errorBody('AGT_ERR_URI_TOO_LONG'));
  } else if (err.code === 'FST_ERR_BAD_URL') {
    void reply.status(400).send(errorBody('AGT_ERR_BAD_URL'));
  } else {
    const status = typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 400;
    void reply.status(status).send(familyBody(status, 'the request could not be routed'));
  }
}

/**
 * Errors Node's HTTP parser raises before any route runs (unfinished headers past the timeout,
 * oversized headers, malformed requests): answered in the ErrorResponse shape, then the
 * connection is closed, as Node itself would.
 */
export function clientErrorHandler(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const status = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : err.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
  const body = JSON.stringify(errorBody(status === 408 ? 'AGT_ERR_REQUEST_TIMEOUT' : status === 431 ? 'AGT_ERR_HEADERS_TOO_LARGE' : 'AGT_ERR_BAD_HTTP'));
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
