// One import point for every API schema: `import { RunRequest } from '../schemas/index.js'`.
export * from './common.js';
export * from './errors.js';
export * from './decisions.js';
export * from './runs.js';
export * from './steer.js';
export * from './schedule.js';
export * from './background.js';
export * from './background-answers.js';
export * from './telemetry.js';
export * from './health.js';
export * from './webhooks.js';
export * from './protocols.js';
export * from './governance.js';
export * from './debug.js';
