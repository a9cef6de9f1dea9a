// Talking to a run in flight: steer messages, interrupt
// requests, and the session concurrency policy of POST /run and /run/sync (item 3).
import { z } from 'zod';
import { IsoDateTime } from './common.js';

/** What a run does when its session already has a run in flight (config `runs.session_policy`). */
export const RunSessionPolicy = z.enum(['enqueue', 'reject', 'interrupt', 'rollback']).meta({
  id: 'RunSessionPolicy',
  description:
    'When the session has a run in flight: `enqueue` waits its turn; `reject` answers 409; `interrupt` stops the running one at its next step boundary (saved `interrupted`) and continues its conversation; `rollback` cancels the running one and removes its turn from the session. Default: config `runs.session_policy` (`enqueue`).',
});
export type RunSessionPolicy = z.infer<typeof RunSessionPolicy>;

/** A name, not an instruction: it is quoted into the message the model reads. */
export const SteerSender = z
  .string()
  .regex(/^[A-Za-z0-9_.@-]{1,64}$/, { error: 'must be 1-64 characters of letters, digits, "_", ".", "@" or "-"' })
  .meta({ description: 'Who sends the message (default: the API key name, else `user`); the model reads it as "Message from <sender>".' });

export const SteerRequest = z
  .strictObject({
    message: z.string().min(1).max(32_768).describe("Delivered once, as a user message, before the run's next model call."),
    sender: SteerSender.nullish(),
  })
  .meta({ id: 'SteerRequest' });
export type SteerRequest = z.infer<typeof SteerRequest>;

export const SteerResponse = z
  .object({
    status: z.literal('queued'),
    message_id: z.string(),
    run_id: z.string(),
  })
  .meta({ id: 'SteerResponse' });
export type SteerResponse = z.infer<typeof SteerResponse>;

export const InterruptResponse = z
  .object({
    status: z
      .enum(['interrupt_requested', 'interrupted'])
      .describe('`interrupted`: it already was; `interrupt_requested`: it stops at its next step boundary.'),
    run_id: z.string(),
    interrupt_id: z.string().nullable(),
  })
  .meta({ id: 'InterruptResponse' });
export type InterruptResponse = z.infer<typeof InterruptResponse>;

export const RunInboxView = z
  .object({
    run_id: z.string(),
    messages: z.array(z.object({ message_id: z.string(), sender: z.string(), message: z.string(), queued_at: IsoDateTime })),
    interrupt: z.object({ interrupt_id: z.string(), requested_at: IsoDateTime, requested_by: z.string().nullable() }).nullable(),
    updated_at: IsoDateTime,
  })
  .meta({ id: 'RunInbox' });
export type RunInboxView = z.infer<typeof RunInboxView>;
