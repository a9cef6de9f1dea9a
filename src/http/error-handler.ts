import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, ERROR_CODES, HttpDetailError, type ErrorCode } from '../errors.js';
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

/** The registered code for a 4xx status that Fastify or Node produced, so the body names it. */
function codeForStatus(status: number): ErrorCode {
  for (const [code, info] of Object.entries(ERROR_CODES)) if (info.status === status) return code as ErrorCode;
  return 'BadRequest';
}

type ValidationItem = { loc: Array<string | number>; msg: string; type: string; ctx?: Record<string, unknown>; input?: unknown };

function validationReply(reply: FastifyReply, detail: ValidationItem[]) {
  return reply.status(422).send({ detail });
}

/**
 * Every error leaves in a documented shape (decisions.md §2): 422 HTTPValidationError for bad
 * input, `{detail}` for the routes whose spec answer is HttpErrorResponse, ErrorResponse for the
 * rest. Nothing else: no stack trace, no internal message of an unexpected error.
 */
export function installErrorHandling(app: FastifyInstance, logServerError: ServerErrorLog = logServerErrorToRequestLog): void {
  app.setErrorHandler((err: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof RequestValidationError) {
      return validationReply(reply, zodIssuesToDetail(err.issues, err.part, err.data));
    }
    if (err instanceof HttpValidationFailure) {
      return validationReply(reply, err.detail);
    }
    if (err instanceof AppError) {
      for (const [k, v] of Object.entries(err.headers)) reply.header(k, v);
      return reply.status(err.status).send(err.toBody());
    }
    if (err instanceof HttpDetailError) {
      return reply.status(err.status).send({ detail: err.detail });
    }
    if (isStoreError(err, 'not_found')) {
      return reply.status(404).send({ error: 'NotFound', message: err.message, detail: null });
    }
    if (isStoreError(err, 'stale_version') || isStoreError(err, 'conflict')) {
      return reply.status(409).send({ error: 'Conflict', message: 'the resource changed while this request was handled; retry', detail: null });
    }
    if (isStoreError(err, 'unavailable')) {
      // The database does not answer (PostgreSQL); /ready says so too. Transient: retry.
      reply.header('retry-after', '1');
      return reply.status(503).send({ error: 'ServerBusy', message: 'the store is unavailable (its database does not answer); retry', detail: null });
    }
    const code = (err as FastifyError).code;
    const status = (err as FastifyError).statusCode;
    // Fastify's own client errors: map each to our shapes.
    if (code === 'FST_ERR_CTP_INVALID_JSON_BODY' || code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || (err instanceof SyntaxError && status === 400)) {
      return validationReply(reply, [
        {
          loc: ['body'],
          msg: `JSON decode error: ${code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'the body is empty' : 'the body is not valid JSON'}`,
          type: 'json_invalid',
        },
      ]);
    }
    if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      return reply.status(413).send({ error: 'PayloadTooLarge', message: 'the request body is larger than the configured limit', detail: null });
    }
    if (code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' || code === 'FST_ERR_CTP_INVALID_CONTENT_LENGTH') {
      return reply.status(415).send({ error: 'UnsupportedMediaType', message: 'send the body as application/json', detail: null });
    }
    if (code === 'FST_ERR_NOT_FOUND') {
      return reply.status(404).send({ error: 'NotFound', message: 'no such route', detail: null });
    }
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return reply.status(status).send({ error: codeForStatus(status), message: err.message, detail: null });
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
    return reply.status(500).send({ error: 'InternalServerError', message: 'an internal error occurred; it has been logged', detail: null });
  });

  app.setNotFoundHandler((request, reply) => {
    reply.status(404).send({ error: 'NotFound', message: `no route ${request.method} ${request.url.split('?')[0]}`, detail: null });
  });
}

/**
 * Fastify's `frameworkErrors`: the router's own failures, raised before a route matched (so the
 * error handler does not see them), in the ErrorResponse shape.
 */
export function frameworkErrorReply(err: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    void reply.status(414).send({ error: 'URITooLong', message: 'a path segment is longer than any id the API accepts', detail: null });
  } else if (err.code === 'FST_ERR_BAD_URL') {
    void reply.status(400).send({ error: 'BadRequest', message: 'the path is not valid percent-encoded UTF-8', detail: null });
  } else {
    const status = typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 400;
    void reply.status(status).send({ error: codeForStatus(status), message: 'the request could not be routed', detail: null });
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
  const code: ErrorCode = status === 408 ? 'RequestTimeout' : status === 431 ? 'RequestHeaderFieldsTooLarge' : 'BadRequest';
  const message =
    status === 408 ? 'the request did not arrive in time' : status === 431 ? 'the request headers are too large' : 'the request could not be read as HTTP/1.1';
  const body = JSON.stringify({ error: code, message, detail: null });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
