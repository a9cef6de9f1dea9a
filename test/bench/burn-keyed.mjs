// The flow benchmark's check of its own method (BENCH_FLOW_BURN_US, test/bench/benchmarks/flow.ts):
// a fixed amount of work, about `us` microseconds of CPU when calibrated, on each request marked
// `x-bench-route: keyed`, before agentd sees it. Fixed work rather than a wall-clock spin: a host
// busy elsewhere deschedules a spin, which then burns less CPU than it says (and the same work
// costs more CPU time on a contended core than at calibration: the rows show what it cost).

/** Installs the burn on `server` (node's http.Server) when `us` > 0. */
export function burnOnKeyed(server, us) {
  if (!(us > 0)) return;
  let sink = 0;
  const spin = (n) => {
    let x = sink;
    for (let i = 0; i < n; i++) x = (x * 1103515245 + 12345) % 2147483648;
    sink = x;
  };
  spin(1e6); // compiled before calibrating
  const cpu0 = process.cpuUsage();
  spin(2e7);
  const d = process.cpuUsage(cpu0);
  const iterations = Math.round((2e7 / (d.user + d.system)) * us);
  server.prependListener('request', (req) => {
    if (req.headers['x-bench-route'] === 'keyed') spin(iterations);
  });
}
