// The AGT_ERR_* registry: every code documented in docs/errors.md and nothing documented that the
// registry lacks (as Fastify checks its FST_ERR_* docs), statuses consistent with the families,
// and message templates filled by domainError.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  AgentdFailure,
  AppError,
  DOMAIN_ERRORS,
  ERROR_CODES,
  HttpDetailError,
  HttpValidationFailure,
  conflict,
  domainError,
  notFound,
} from '../../src/errors.js';

const doc = readFileSync(join(import.meta.dirname, '../../docs/errors.md'), 'utf8');

describe('docs/errors.md and the AGT_ERR_* registry', () => {
  it('lists every registered code with its status and family', () => {
    for (const [code, info] of Object.entries(DOMAIN_ERRORS)) {
      const family = info.error === null ? '—' : `\`${info.error}\``;
      expect(doc, code).toContain(`| \`${code}\` | ${info.status} | ${family} |`);
    }
  });

  it('names no code the registry does not have', () => {
    const documented = new Set(doc.match(/AGT_ERR_[A-Z_]+/g));
    const unknown = [...documented].filter((c) => !(c in DOMAIN_ERRORS));
    expect(unknown).toEqual([]);
  });

  it("gives every code of a family that family's status", () => {
    for (const [code, info] of Object.entries(DOMAIN_ERRORS)) {
      if (info.error !== null) expect(info.status, code).toBe(ERROR_CODES[info.error].status);
    }
  });
});

describe('domainError', () => {
  it('fills the template in order and keeps detail and headers', () => {
    const e = domainError('AGT_ERR_APPROVAL_EXPIRED', ['approval_1', '2026-01-01T00:00:00Z'], { detail: 'expired', headers: { 'x-a': '1' } });
    expect(e).toBeInstanceOf(AppError);
    expect(e.status).toBe(409);
    expect(e.toBody()).toEqual({
      error: 'Conflict',
      code: 'AGT_ERR_APPROVAL_EXPIRED',
      message: 'approval approval_1 expired at 2026-01-01T00:00:00Z',
      detail: 'expired',
    });
    expect(e.headers).toEqual({ 'x-a': '1' });
  });

  it('maps a notFound kind to its code and a bare conflict to the generic one', () => {
    expect(notFound('background task', 't1').toBody()).toMatchObject({
      code: 'AGT_ERR_BACKGROUND_TASK_NOT_FOUND',
      message: "background task 't1' was not found",
    });
    expect(notFound('trace of run', 'r1').domainCode).toBe('AGT_ERR_TRACE_NOT_FOUND');
    expect(conflict('x').toBody()).toMatchObject({ error: 'Conflict', code: 'AGT_ERR_CONFLICT' });
  });

  it('gives every answered shape one base class with a status and a code', () => {
    const shapes: AgentdFailure[] = [
      domainError('AGT_ERR_RUN_ENDED', ['run_1', 'completed']),
      new HttpDetailError(404, 'no such file', 'AGT_ERR_WORKSPACE_FILE_NOT_FOUND'),
      new HttpValidationFailure([{ loc: ['body'], msg: 'bad', type: 'value_error' }]),
    ];
    expect(shapes.map((e) => [e instanceof AgentdFailure, e.status, e.domainCode])).toEqual([
      [true, 409, 'AGT_ERR_RUN_ENDED'],
      [true, 404, 'AGT_ERR_WORKSPACE_FILE_NOT_FOUND'],
      [true, 422, 'AGT_ERR_VALIDATION'],
    ]);
  });

  it('refuses a code whose body is not an ErrorResponse', () => {
    expect(() => domainError('AGT_ERR_VALIDATION', [])).toThrow(/not an ErrorResponse code/);
  });
});
