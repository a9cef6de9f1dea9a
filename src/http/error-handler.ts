import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, HttpDetailError } from '../errors.js';
import { isStoreError } from '../store/store.js';
import { zodIssuesToDetail } from '../schemas/index.js';
import { RequestValidationError } from './validation.js';

type ValidationItem = { loc: Array<string | number>; msg: string; type: string; ctx?: Record<string, unknown>; input?: unknown };

function validationReply(reply: FastifyReply, detail: ValidationItem[]) {
  return reply.status(422).send({ detail });
}

/**
 * Every error leaves in a documented shape (decisions.md §2): 422 HTTPValidationError for bad
 * input, `{detail}` for the routes whose spec answer is HttpErrorResponse, ErrorResponse for the
 * rest. Nothing else: no stack trace, no internal message of an unexpected error.
 */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof RequestValidationError) {
      return validationReply(reply, zodIssuesToDetail(err.issues, err.part, err.data));
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
    const code = (err as FastifyError).code;
    const status = (err as FastifyError).statusCode;
    // Fastify's own client errors: map each to our shapes.
    if (code === 'FST_ERR_CTP_INVALID_JSON_BODY' || code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || (err instanceof SyntaxError && status === 400)) {
      return validationReply(reply, [{ loc: ['body'], msg: `JSON decode error: ${code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'the body is empty' : 'the body is not valid JSON'}`, type: 'json_invalid' }]);
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
      return reply.status(status).send({ error: status === 404 ? 'NotFound' : 'BadRequest', message: err.message, detail: null });
    }
    request.log.error({ err }, 'unhandled error');
    return reply.status(500).send({ error: 'InternalServerError', message: 'an internal error occurred; it has been logged', detail: null });
  });

  app.setNotFoundHandler((request, reply) => {
    reply.status(404).send({ error: 'NotFound', message: `no route ${request.method} ${request.url.split('?')[0]}`, detail: null });
  });
}
