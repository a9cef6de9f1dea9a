// Every command of `agentd`: its words, arguments, flags and help, and where its code lives. The
// code of each group is imported only when that command runs: `agentd runs ls` never loads the
// server (config, store, models), and `agentd serve` never loads the HTTP client, so neither pays
// for the other at start-up.
import type { CommandSpec, Parsed } from './args.js';

export type Handler = (p: Parsed, spec: CommandSpec) => Promise<number>;
export interface Command extends CommandSpec {
  load: () => Promise<Handler>;
}

const local = (name: 'serve' | 'configCheck' | 'configSchema' | 'machines') => async () => (await import('./serve.js'))[name];
const runs =
  (
    name:
      | 'run'
      | 'runsLs'
      | 'runsShow'
      | 'runsCancel'
      | 'runsResume'
      | 'runsSteer'
      | 'runsInterrupt'
      | 'approvalsLs'
      | 'approvalsApprove'
      | 'approvalsDeny'
      | 'budgetGrant'
      | 'budgetDeny'
      | 'whoami',
  ) =>
  async () =>
    (await import('./runs.js'))[name];
const debug = (name: 'runsCheckpoints' | 'runsFork' | 'runsReplay' | 'runsCompare' | 'evalsCreate' | 'evalsShow' | 'evalsLs') => async () =>
  (await import('./debug.js'))[name];
const variantOptions = {
  model: { type: 'string', value: 'JSON', help: "A model config in the shape of a registered agent's model_config." },
  agent: { type: 'string', value: 'ID', help: 'A registered agent to re-ask.' },
  system: { type: 'string', value: 'TEXT', help: 'A system instruction to re-ask with.' },
  tools: { type: 'string', value: 'recorded|live', help: 'How tool calls are answered (default recorded; a non-idempotent tool never runs).' },
} as const;
const tasks = (name: 'tasksLs' | 'tasksCreate' | 'tasksRun' | 'tasksPause' | 'tasksResume' | 'tasksPreview' | 'eventsTail') => async () =>
  (await import('./tasks.js'))[name];

const note = { type: 'string', value: 'TEXT', help: "A note stored with the decision (a denial's note reaches the model)." } as const;

export const COMMANDS: Command[] = [
  {
    path: ['serve'],
    summary: 'Start the service. With no config it runs on the embedded store with the built-in demo model (offline).',
    options: {
      config: { type: 'string', value: 'FILE', help: 'Config file (JSON; env AGENTD_CONFIG).' },
      host: { type: 'string', value: 'H', help: 'Listen address (env AGENTD_HOST; default 127.0.0.1).' },
      port: { type: 'string', value: 'N', help: 'Listen port (env AGENTD_PORT; default 8000; 0 picks a free one).' },
      'data-dir': { type: 'string', value: 'DIR', help: 'Data directory (env AGENTD_DATA_DIR; default ./.agentd).' },
      inspect: { type: 'string', value: '[URL]', help: 'Send XState inspection events to a WebSocket endpoint (default ws://localhost:8080).' },
      'demo-delay-ms': {
        type: 'string',
        value: 'MS',
        help: 'Demo model only: wait between streamed words, so answers arrive live (default 15; 0 for none).',
      },
    },
    details: [
      'Model env: AGENTD_MODEL_BASE_URL, AGENTD_MODEL, AGENTD_MODEL_API_KEY (else OPENAI_API_KEY).',
      'Store env: AGENTD_STORE_URL (a postgres:// URL: the PostgreSQL store, migrated at start-up; docs/operations.md).',
      'Logs: AGENTD_LOG_LEVEL, AGENTD_LOG_FORMAT, AGENTD_LOG_REQUESTS (docs/operations.md).',
      '--inspect: see docs/machines.md ("Watching the machines").',
    ].join('\n'),
    load: local('serve'),
  },
  {
    path: ['config', 'check'],
    summary: 'Validate a config file and print the resolved config (secrets masked).',
    options: { config: { type: 'string', value: 'FILE', help: 'Config file (env AGENTD_CONFIG).' } },
    load: local('configCheck'),
  },
  {
    path: ['migrate'],
    summary: "Apply the PostgreSQL store's pending schema migrations and exit (serve also applies them at start-up).",
    options: {
      'store-url': {
        type: 'string',
        value: 'URL',
        help: 'PostgreSQL connection string (default: env AGENTD_STORE_URL, else store.url of the config; prefer the env: a flag is visible in `ps`).',
      },
      config: { type: 'string', value: 'FILE', help: 'Config file (env AGENTD_CONFIG).' },
    },
    details:
      'Safe to run while instances are starting or serving: everyone migrates under one advisory lock.\nRefuses (exit 1) a database migrated by a newer agentd.',
    load: async () => (await import('./migrate.js')).migrateCommand,
  },
  { path: ['config', 'schema'], summary: 'Print the JSON Schema of the config file.', load: local('configSchema') },
  { path: ['machines'], summary: 'Print every state machine as a Mermaid diagram.', load: local('machines') },
  {
    path: ['run'],
    args: ['QUERY'],
    remote: true,
    summary: 'Run the agent: the answer streams to stdout, a status line (tool calls, approvals) to stderr.',
    options: {
      session: { type: 'string', value: 'S', help: 'Continue this session (default: a new one).' },
      agent: { type: 'string', value: 'ID', help: 'Run as this registered agent (POST /background/agents; default: the served agent).' },
      sync: { type: 'boolean', help: 'Wait for the whole answer (POST /run/sync) instead of streaming it.' },
      policy: { type: 'string', value: 'P', help: 'When the session has a run in flight: enqueue (default), reject, interrupt or rollback.' },
    },
    details:
      'Exit: 0 success, 1 error/cancelled/timeout, 3 waiting for an approval or budget (the ids and the\ncommands to decide are printed) or interrupted (`runs resume` continues it). Ctrl-C closes the stream, which cancels the run.',
    load: runs('run'),
  },
  {
    path: ['runs', 'ls'],
    remote: true,
    summary: 'List runs, newest first: status, session, agent, task, created, duration, steps, tokens, cost.',
    options: {
      status: { type: 'string', value: 'S', help: 'Only runs in this status (queued, running, awaiting_approval, awaiting_budget, completed, failed, ...).' },
      session: { type: 'string', value: 'S', help: 'Only runs of this session.' },
      agent: { type: 'string', value: 'A', help: 'Only runs of this agent.' },
      task: { type: 'string', value: 'T', help: 'Only runs started by this background task.' },
      since: { type: 'string', value: 'TIME', help: 'Only runs created at or after TIME (ISO 8601 with a timezone, e.g. 2026-01-01T09:00:00Z).' },
      until: { type: 'string', value: 'TIME', help: 'Only runs created before TIME.' },
      oldest: { type: 'boolean', help: 'Oldest first (the API default) instead of newest first.' },
      limit: { type: 'string', value: 'N', help: 'At most N runs (server default 50).' },
      cursor: { type: 'string', value: 'C', help: 'Continue after a previous page (its next_cursor).' },
    },
    load: runs('runsLs'),
  },
  { path: ['runs', 'show'], args: ['RUN'], remote: true, summary: 'Show one run: status, usage, tool calls, approvals, answer.', load: runs('runsShow') },
  { path: ['runs', 'cancel'], args: ['RUN'], remote: true, summary: 'Cancel a run.', load: runs('runsCancel') },
  {
    path: ['runs', 'steer'],
    args: ['RUN', 'MESSAGE'],
    remote: true,
    summary: 'Send a run in flight a message it reads once, as a user message, before its next model call.',
    options: { sender: { type: 'string', value: 'NAME', help: 'Who sends it (default: the API key name, else "user").' } },
    load: runs('runsSteer'),
  },
  {
    path: ['runs', 'interrupt'],
    args: ['RUN'],
    remote: true,
    summary: 'Stop a running run at its next step boundary (continue it with `runs resume`).',
    load: runs('runsInterrupt'),
  },
  {
    path: ['runs', 'resume'],
    args: ['RUN'],
    remote: true,
    summary: 'Continue a decided, interrupted or orphaned run and print its result (exit codes as `run`).',
    load: runs('runsResume'),
  },
  {
    path: ['runs', 'checkpoints'],
    args: ['RUN', 'CHECKPOINT?'],
    remote: true,
    summary: "A run's checkpoints, or one checkpoint's conversation.",
    load: debug('runsCheckpoints'),
  },
  {
    path: ['runs', 'fork'],
    args: ['RUN', 'CHECKPOINT'],
    remote: true,
    summary: 'Start a new run from a checkpoint, with edits, and print its result.',
    options: {
      message: { type: 'string', value: 'TEXT', help: 'A user message added last.' },
      'tool-results': { type: 'string', value: 'JSON', help: 'Tool call id → the result the model reads instead.' },
      session: { type: 'string', value: 'ID', help: 'Run in this session (default: a new one seeded with the conversation).' },
    },
    load: debug('runsFork'),
  },
  {
    path: ['runs', 'replay'],
    args: ['RUN'],
    remote: true,
    summary: 'Re-ask a variant with the same inputs, tool results from the recording, and print its result.',
    options: { ...variantOptions, from: { type: 'string', value: 'CHECKPOINT', help: 'Replay from this checkpoint instead of the start.' } },
    load: debug('runsReplay'),
  },
  { path: ['runs', 'compare'], args: ['A', 'B'], remote: true, summary: 'Two runs side by side and the diff of their answers.', load: debug('runsCompare') },
  {
    path: ['approvals', 'ls'],
    remote: true,
    summary: 'Pending approvals across runs that this key may decide (runs awaiting approval; a reader sees all).',
    load: runs('approvalsLs'),
  },
  { path: ['whoami'], remote: true, summary: 'The API key this command signs in with: its name, role and tenant (GET /whoami).', load: runs('whoami') },
  {
    path: ['approvals', 'approve'],
    args: ['RUN', 'APPROVAL'],
    remote: true,
    summary: 'Approve a pending tool call; the run resumes once all of its approvals are decided.',
    options: {
      args: { type: 'string', value: 'JSON', help: 'Approve this edited call instead (a JSON object of arguments).' },
      note: { ...note },
      approver: { type: 'string', value: 'NAME', help: "Who decides (default: the API key's name, from GET /whoami; with auth off, $USER)." },
    },
    load: runs('approvalsApprove'),
  },
  {
    path: ['approvals', 'deny'],
    args: ['RUN', 'APPROVAL'],
    remote: true,
    summary: 'Deny a pending tool call: it does not run, and the model is told "Denied by <approver>: <note>".',
    options: { note: { ...note }, approver: { type: 'string', value: 'NAME', help: "Who decides (default: the API key's name; with auth off, $USER)." } },
    load: runs('approvalsDeny'),
  },
  {
    path: ['budget', 'grant'],
    args: ['RUN'],
    remote: true,
    summary: 'Grant the budget a run waits for; it resumes.',
    options: {
      amount: { type: 'string', value: 'X', help: 'Amount to add (default: the shortfall).' },
      note: { ...note },
      approver: { type: 'string', value: 'NAME', help: "Who decides (default: the API key's name; with auth off, $USER)." },
    },
    load: runs('budgetGrant'),
  },
  {
    path: ['budget', 'deny'],
    args: ['RUN'],
    remote: true,
    summary: 'Deny the budget a run waits for; it ends budget_exhausted.',
    options: { note: { ...note }, approver: { type: 'string', value: 'NAME', help: "Who decides (default: the API key's name; with auth off, $USER)." } },
    load: runs('budgetDeny'),
  },
  { path: ['tasks', 'ls'], remote: true, summary: 'List background tasks.', load: tasks('tasksLs') },
  {
    path: ['tasks', 'create'],
    remote: true,
    summary: 'Create a background task with one schedule.',
    options: {
      id: { type: 'string', value: 'ID', help: 'Task id (required).' },
      query: { type: 'string', value: 'Q', help: 'What the agent is asked at each run (required).' },
      cron: { type: 'string', value: 'EXPR', help: 'A 5-field cron expression.' },
      tz: { type: 'string', value: 'TZ', help: 'IANA time zone of --cron (default UTC).' },
      every: { type: 'string', value: 'SECONDS', help: 'Run every SECONDS.' },
      at: { type: 'string', value: 'ISO', help: 'Run once at this instant (ISO 8601).' },
      manual: { type: 'boolean', help: 'No schedule: runs only with `tasks run`.' },
      replace: { type: 'boolean', help: 'Replace an existing task of that id.' },
    },
    details: 'Exactly one of --cron, --every, --at, --manual.',
    load: tasks('tasksCreate'),
  },
  {
    path: ['tasks', 'run'],
    args: ['ID'],
    remote: true,
    summary: 'Run a task now.',
    options: { wait: { type: 'boolean', help: 'Wait until the run ends (or waits for a person); exit codes as `run`.' } },
    load: tasks('tasksRun'),
  },
  { path: ['tasks', 'pause'], args: ['ID'], remote: true, summary: 'Pause the schedule of a task (manual runs still work).', load: tasks('tasksPause') },
  {
    path: ['tasks', 'resume'],
    args: ['ID'],
    remote: true,
    summary: 'Resume the schedule of a task (occurrences of the pause are skipped).',
    load: tasks('tasksResume'),
  },
  {
    path: ['tasks', 'preview'],
    args: ['ID'],
    remote: true,
    summary: 'The next due times of a task, in UTC and its time zone, with DST notes.',
    options: { count: { type: 'string', value: 'N', help: 'How many occurrences (server default).' } },
    load: tasks('tasksPreview'),
  },
  {
    path: ['evals', 'create'],
    args: ['NAME'],
    remote: true,
    summary: 'Replay a batch of past runs against a variant, durably, and score them.',
    options: {
      ...variantOptions,
      runs: { type: 'string', value: 'ID,ID,…', help: 'The runs to replay.' },
      filter: {
        type: 'string',
        value: 'JSON',
        help: 'Select runs instead: {agent_id?, task_id?, session_id?, status?, since?, until?, limit} (limit default 100).',
      },
      scorer: { type: 'string', value: 'JSON', help: '{"type":"exact"}, {"type":"contains","text":…} or {"type":"judge","agent_id":…}.' },
      concurrency: { type: 'string', value: 'N', help: 'Replays in flight at once (default 4).' },
    },
    load: debug('evalsCreate'),
  },
  { path: ['evals', 'show'], args: ['EVAL'], remote: true, summary: 'An evaluation: progress, aggregates and one line per run.', load: debug('evalsShow') },
  { path: ['evals', 'ls'], remote: true, summary: 'Evaluations, newest first.', load: debug('evalsLs') },
  {
    path: ['events', 'tail'],
    remote: true,
    summary: 'Follow the telemetry events of a session (or of one run): stored ones after --from, then new ones.',
    options: {
      session: { type: 'string', value: 'S', help: 'The session to follow.' },
      run: { type: 'string', value: 'R', help: "Only this run's events (its session is looked up when --session is absent)." },
      from: { type: 'string', value: 'CURSOR', help: 'Start after this cursor (default: from the beginning).' },
      limit: { type: 'string', value: 'N', help: 'Stop after N events (default: follow until Ctrl-C).' },
    },
    details: 'Reconnects with Last-Event-ID when the connection drops, so no event is missed.',
    load: tasks('eventsTail'),
  },
];

export const GROUPS: Record<string, string> = {
  config: 'Check or describe the config file.',
  runs: 'List, show, cancel and resume runs; checkpoints, forks, replays, comparisons.',
  evals: 'Evaluations over past runs: create, show, list.',
  approvals: 'Pending approvals: list, approve, deny.',
  budget: 'Grant or deny the budget a run waits for.',
  tasks: 'Background tasks: list, create, run, pause, resume, preview.',
  events: 'Follow telemetry events.',
};
