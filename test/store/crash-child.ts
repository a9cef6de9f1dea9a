// Child process of crash.test.ts: opens a LevelStore in argv[2] and performs WRITES concurrent
// writes, printing one line per write AFTER its promise resolved (= acknowledged):
//   R <i>            createRecord('runs', rec_<i>)
//   C <i>            commit creating rec_<i>_a and rec_<i>_b together
//   E <i> <c1,c2..>  appendEvents of ev_<i>_<j>, with the cursors it got
// Flow control keeps the run deterministic: the parent writes to stdin how many acks it has seen,
// and at most WINDOW writes may be started beyond that. So the parent's SIGKILL always lands
// before all writes are done, with writes still in flight, however slow the machine is.
import { createInterface } from 'node:readline';
import { LevelStore } from '../../src/store/level.js';
import { WRITES, WINDOW, crashEvents, crashValue } from './crash-shared.js';

const store = new LevelStore({ path: process.argv[2] });
await store.open();

let launched = 0;
let allowed = WINDOW;
const ack = (line: string) => process.stdout.write(line + '\n'); // synchronous for pipes on Linux

const launch = (i: number): void => {
  const kind = i % 4;
  const done =
    kind === 0
      ? store.createRecord('runs', `rec_${i}`, crashValue(i), { bucket: `b${i % 7}` }).then(() => `R ${i}`)
      : kind === 3
        ? store
            .commit([
              { op: 'create', kind: 'runs', id: `rec_${i}_a`, value: crashValue(i), indexes: { bucket: `b${i % 7}` } },
              { op: 'create', kind: 'runs', id: `rec_${i}_b`, value: crashValue(i + 1), indexes: { bucket: 'pair' } },
            ])
            .then(() => `C ${i}`)
        : store.appendEvents(crashEvents(i)).then((evs) => `E ${i} ${evs.map((e) => e.cursor).join(',')}`);
  done.then(ack, (e: unknown) => {
    process.stderr.write(`write ${i} failed: ${String(e)}\n`);
    process.exit(1);
  });
};

const pump = (): void => {
  while (launched < WRITES && launched < allowed) launch(launched++);
};

createInterface({ input: process.stdin })
  .on('line', (line) => {
    allowed = Math.max(allowed, Number(line) + WINDOW);
    pump();
  })
  .on('close', () => process.exit(0)); // parent went away
pump();
