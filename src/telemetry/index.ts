// Public surface of the telemetry core: records, live bus and replay streams, traces, OTLP export.
export * from './record.js';
export * from './redact.js';
export * from './bus.js';
export * from './traces.js';
export * from './otlp.js';
