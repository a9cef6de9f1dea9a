import { MemoryStore } from '../../src/store/memory.js';
import { runStoreContract } from './store.contract.js';

runStoreContract('memory', async () => {
  const store = new MemoryStore();
  await store.open();
  return { store, cleanup: () => store.close() };
});
