import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { sessionMachine } from '../../machines/session.machine.js';

describe('session machine', () => {
  it('admits runs one at a time, in arrival order; a queued run that leaves is dropped', () => {
    const admitted: string[] = [];
    const actor = createActor(sessionMachine.provide({ actions: { admit: (_a, p) => void admitted.push(p.run_id) } }), { input: { session_id: 's' } }).start();
    for (const id of ['a', 'b', 'c', 'd']) actor.send({ type: 'ENQUEUE', run_id: id });
    expect(admitted).toEqual(['a']);
    actor.send({ type: 'RELEASE', run_id: 'c' }); // gave up while queued
    actor.send({ type: 'RELEASE', run_id: 'a' });
    expect(admitted).toEqual(['a', 'b']);
    actor.send({ type: 'RELEASE', run_id: 'b' });
    expect(admitted).toEqual(['a', 'b', 'd']);
    actor.send({ type: 'RELEASE', run_id: 'd' });
    expect(actor.getSnapshot().value).toBe('idle');
  });
});
