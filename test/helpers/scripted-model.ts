// One scripted model server shared by the tests of a describe block (or a file).
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';

/**
 * Registers the hooks: the server is started before the tests (and handed to `started`), its
 * script and recorded requests are reset before each test, and it is closed after them all.
 */
export function useScriptedOpenAI(started: (server: ScriptedOpenAI) => void): void {
  let server: ScriptedOpenAI | undefined;
  beforeAll(async () => {
    server = await startScriptedOpenAI();
    started(server);
  });
  beforeEach(() => server?.reset());
  afterAll(async () => {
    await server?.close();
  });
}
