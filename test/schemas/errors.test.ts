import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ApprovalDecisionRequest,
  BudgetDecisionRequest,
  ErrorResponse,
  EventsQuery,
  HTTPValidationError,
  HttpErrorResponse,
  RunIdParams,
  RunWaitTimeoutResponse,
  ValidationErrorItem,
  safeParseRequest,
  zodIssuesToDetail,
} from '../../src/schemas/index.js';

function detailOf(schema: z.ZodType, data: unknown, prefix: 'body' | 'query' | 'path' = 'body') {
  const r = schema.safeParse(data);
  if (r.success) throw new Error('expected a validation failure');
  return zodIssuesToDetail(r.error.issues, prefix, data);
}

describe('zodIssuesToDetail', () => {
  it('missing, extra_forbidden, string_too_short, enum', () => {
    const detail = detailOf(ApprovalDecisionRequest, { decision: 'maybe', approver: '', colour: 'red' });
    expect(detail).toEqual([
      {
        loc: ['body', 'decision'],
        msg: "Input should be 'approve' or 'deny'",
        type: 'enum',
        ctx: { expected: "'approve' or 'deny'" },
        input: 'maybe',
      },
      {
        loc: ['body', 'approver'],
        msg: 'String should have at least 1 character',
        type: 'string_too_short',
        ctx: { min_length: 1 },
        input: '',
      },
      { loc: ['body', 'colour'], msg: 'Extra inputs are not permitted', type: 'extra_forbidden', input: 'red' },
    ]);
    expect(detailOf(ApprovalDecisionRequest, {})).toEqual([
      { loc: ['body', 'decision'], msg: 'Field required', type: 'missing' },
      { loc: ['body', 'approver'], msg: 'Field required', type: 'missing' },
    ]);
  });

  it('greater_than for amount 0 and number_type for a string', () => {
    expect(detailOf(BudgetDecisionRequest, { decision: 'grant', approver: 'ann', amount: 0 })).toEqual([
      { loc: ['body', 'amount'], msg: 'Input should be greater than 0', type: 'greater_than', ctx: { gt: 0 }, input: 0 },
    ]);
    expect(detailOf(BudgetDecisionRequest, { decision: 'grant', approver: 'ann', amount: 'lots' })).toEqual([
      { loc: ['body', 'amount'], msg: 'Input should be a valid number', type: 'number_type', input: 'lots' },
    ]);
  });

  it('query and path prefixes; range errors; pattern mismatch', () => {
    expect(detailOf(EventsQuery, { limit: '5000' }, 'query')).toEqual([
      { loc: ['query', 'limit'], msg: 'Input should be less than or equal to 1000', type: 'less_than_equal', ctx: { le: 1000 }, input: '5000' },
    ]);
    const [item] = detailOf(RunIdParams, { run_id: '..' }, 'path');
    expect(item.loc).toEqual(['path', 'run_id']);
    expect(item.type).toBe('string_pattern_mismatch');
    expect(item.msg).toMatch(/without/);
    expect(item.input).toBe('..');
  });

  it('union of string and list reports one type_error', () => {
    expect(detailOf(EventsQuery, { event_type: 5 }, 'query')).toEqual([
      { loc: ['query', 'event_type'], msg: 'Input should be string or array', type: 'type_error', ctx: { expected: 'string or array' }, input: 5 },
    ]);
  });

  it('works without data, using reportInput issues', () => {
    const r = ApprovalDecisionRequest.safeParse({ decision: 'approve' }, { reportInput: true });
    expect(r.success).toBe(false);
    if (!r.success) {
      expect(zodIssuesToDetail(r.error.issues, 'body')).toEqual([{ loc: ['body', 'approver'], msg: 'Field required', type: 'missing' }]);
    }
  });

  it('every item matches the ValidationError schema, nested paths included', () => {
    const data = { task_id: 'ok', query: 'q', schedule: { type: 'interval', seconds: 1.5, misfire_policy: 'no' }, extra: [1] };
    const r = safeParseRequest(
      z.strictObject({
        task_id: z.string(),
        query: z.string(),
        schedule: z.strictObject({ type: z.string(), seconds: z.number().int(), misfire_policy: z.enum(['a', 'b']) }),
      }),
      data,
      'body',
    );
    expect(r.success).toBe(false);
    if (!r.success) {
      expect(HTTPValidationError.safeParse({ detail: r.detail }).success).toBe(true);
      expect(r.detail.map((d) => d.loc)).toEqual([
        ['body', 'schedule', 'seconds'],
        ['body', 'schedule', 'misfire_policy'],
        ['body', 'extra'],
      ]);
      expect(r.detail[0].type).toBe('int_type');
      for (const d of r.detail) expect(ValidationErrorItem.safeParse(d).success).toBe(true);
    }
  });

  it('safeParseRequest returns the parsed value on success', () => {
    const r = safeParseRequest(BudgetDecisionRequest, { decision: 'deny', approver: 'bob' }, 'body');
    expect(r).toEqual({ success: true, data: { decision: 'deny', approver: 'bob' } });
  });
});

describe('error bodies', () => {
  it('ErrorResponse error is one of the registry codes', () => {
    expect(ErrorResponse.safeParse({ error: 'NotFound', code: 'AGT_ERR_RUN_NOT_FOUND', message: "run 'x' was not found", detail: null }).success).toBe(true);
    // Every ErrorResponse carries its domain code (docs/errors.md), and only a registered one.
    expect(ErrorResponse.safeParse({ error: 'NotFound', message: "run 'x' was not found", detail: null }).success).toBe(false);
    expect(ErrorResponse.safeParse({ error: 'NotFound', code: 'AGT_ERR_NOPE', message: 'x', detail: null }).success).toBe(false);
    expect(ErrorResponse.safeParse({ error: 'Teapot', message: 'x' }).success).toBe(false);
  });

  it('HttpErrorResponse requires detail of any type', () => {
    expect(HttpErrorResponse.safeParse({ detail: 'path outside the workspace' }).success).toBe(true);
    expect(HttpErrorResponse.safeParse({ detail: { a: 1 } }).success).toBe(true);
    expect(HttpErrorResponse.safeParse({}).success).toBe(false);
  });

  it('run-wait timeout body', () => {
    const body = {
      detail: {
        message: 'run did not finish within 300 s',
        run_id: 'bgrun_1',
        task_id: 't',
        status: 'running',
        request_timeout_seconds: 300,
        wait_timeout_seconds: null,
      },
    };
    expect(RunWaitTimeoutResponse.parse(body)).toEqual(body);
    expect(RunWaitTimeoutResponse.safeParse({ detail: { ...body.detail, run_id: undefined } }).success).toBe(false);
  });
});
