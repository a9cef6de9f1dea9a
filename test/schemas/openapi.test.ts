// The schemas feed OpenAPI through @fastify/type-provider-zod, which names components after the
// ids in zod's global registry and appends "Input" for request variants.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import * as S from '../../src/schemas/index.js';

const registryIds = (): string[] => {
  const ids: string[] = [];
  for (const value of Object.values(S)) {
    if (value instanceof z.ZodType) {
      const id = z.globalRegistry.get(value)?.id;
      if (id) ids.push(id);
    }
  }
  return ids;
};

describe('schema registry', () => {
  it('every request and response schema has an OpenAPI id', () => {
    const named = [
      'RunRequest',
      'RunResponse',
      'RunView',
      'RunsListResponse',
      'ApprovalDecisionRequest',
      'BudgetDecisionRequest',
      'OutcomeRequest',
      'BackgroundTaskSpec',
      'BackgroundTaskCreateRequest',
      'BackgroundTaskPatchRequest',
      'BackgroundTaskRunRequest',
      'ScheduleSpec',
      'OverlapPolicy',
      'RetryPolicy',
      'SessionPolicy',
      'WorkspacePolicy',
      'BackgroundRun',
      'BackgroundAttempt',
      'BackgroundScheduleState',
      'BackgroundAgentSpec',
      'BackgroundAgentRegistrationRequest',
      'BackgroundTasksResponse',
      'BackgroundRunsResponse',
      'BackgroundAgentsResponse',
      'BackgroundRunEventsResponse',
      'BackgroundRunWorkspaceResponse',
      'BackgroundStatusResponse',
      'BackgroundManagerStatusResponse',
      'BackgroundTaskStatusResponse',
      'SchedulePreviewResponse',
      'HealthResponse',
      'ReadinessResponse',
      'MetricsResponse',
      'ErrorResponse',
      'HttpErrorResponse',
      'HTTPValidationError',
      'RunWaitTimeoutResponse',
      'EventsResponse',
      'TraceResponse',
      'TracesListResponse',
      'RunBudgetResponse',
      'BudgetDecisionResponse',
    ] as const;
    for (const name of named) {
      const schema = (S as unknown as Record<string, z.ZodType>)[name];
      expect(schema, name).toBeInstanceOf(z.ZodType);
      expect(z.globalRegistry.get(schema)?.id, name).toBeTruthy();
    }
  });

  it('ids are unique and none collides with the type provider "Input" suffix', () => {
    const ids = registryIds();
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids) expect(ids).not.toContain(`${id}Input`);
  });

  it('query and path schemas stay inline (no id), so swagger can list their parameters', () => {
    for (const name of ['RunsListQuery', 'EventsQuery', 'TracesListQuery', 'BackgroundRunsListQuery', 'RunIdParams', 'TaskIdParams']) {
      const schema = (S as unknown as Record<string, z.ZodType>)[name];
      expect(z.globalRegistry.get(schema)?.id, name).toBeUndefined();
    }
  });

  it('the whole registry converts to JSON Schema in both directions', () => {
    for (const io of ['input', 'output'] as const) {
      const out = z.toJSONSchema(z.globalRegistry, { target: 'draft-2020-12', io, unrepresentable: 'any' });
      expect(Object.keys(out.schemas)).toEqual(expect.arrayContaining(['RunRequest', 'ScheduleSpec', 'BackgroundRun']));
    }
    const input = z.toJSONSchema(z.globalRegistry, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any' });
    const task = input.schemas.BackgroundTaskCreateRequest as { required: string[]; additionalProperties: boolean };
    expect(task.required.sort()).toEqual(['query', 'schedule', 'task_id']);
    expect(task.additionalProperties).toBe(false);
  });
});
