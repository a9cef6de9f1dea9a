// ESLint (flat config) for the layout: the dependency rules of docs/architecture.md ("The
// dependency rule"), one block per layer. Only layout rules live here, no style rules.
// `npx eslint .` runs it; test/arch/layout.test.ts runs it in npm test.
//
// The patterns match import specifiers as written (relative paths): every file of a layer sits in
// that layer's folder, so `../runtime/x.js` from src/agent/ (or `../../runtime/x.js` from
// src/agent/tools/) is the runtime layer.
import tseslint from 'typescript-eslint';

/** An import of one of `src/<folder>/` from a sibling layer of src/ (any depth). */
const layer = (...folders) => `^(\\.\\./)+(${folders.join('|')})/`;
/** An import of one of the composition-root files `src/<file>.js`. */
const rootFile = (...files) => `^(\\.\\./)+(${files.join('|')})\\.js$`;

const rule = (patterns, paths = []) => ['error', { paths, patterns }];
const forbid = (regex, message) => ({ regex, message });

export default tseslint.config(
  {
    ignores: ['node_modules/**', 'dist/**', '.agentd/**', 'tmp/**', 'src/client/openapi-types.ts'],
  },
  {
    files: ['**/*.{ts,tsx,mts,js,mjs}'],
    languageOptions: { parser: tseslint.parser, ecmaVersion: 2023, sourceType: 'module' },
    // Directives for rules this config does not turn on (no-control-regex, …) are left alone.
    linterOptions: { reportUnusedDisableDirectives: 'off' },
  },
  // No source file over 500 lines (the generated client types are ignored above): a file that
  // grows past it holds more than one part (docs/architecture.md "Guard rails").
  {
    files: ['src/**/*.{ts,tsx}', 'machines/**/*.ts'],
    rules: { 'max-lines': ['error', { max: 500 }] },
  },

  // machines/: pure statecharts and policies. xstate and other machines/ files only: no src/ (the
  // domain types they need live beside them), no Node built-ins, no clock, no randomness, no timers.
  {
    files: ['machines/**/*.ts'],
    rules: {
      'no-restricted-imports': rule([
        forbid('(^|/)src/', 'machines/ import nothing from src/: put the types a machine needs beside the machines (docs/architecture.md)'),
        forbid('^node:', 'machines/ are pure: no Node built-ins'),
        forbid('^(?!\\.|xstate$|node:)', 'machines/ import only xstate and other machines/ files'),
      ]),
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'machines/ are pure: times arrive inside events' },
        { object: 'Math', property: 'random', message: 'machines/ are pure: ids and jitter seeds arrive inside events' },
      ],
      'no-restricted-globals': [
        'error',
        ...['setTimeout', 'setInterval', 'setImmediate', 'process', 'fetch'].map((name) => ({
          name,
          message: 'machines/ are pure: durable time lives in rows, effects are bound with .provide()',
        })),
      ],
    },
  },

  // src/config.ts reads the environment (the logger's settings too: its `log` section); the
  // composition root (main, cli) may read its own switches.
  {
    files: ['src/**/*.{ts,tsx}'],
    ignores: ['src/config.ts', 'src/main.ts', 'src/cli.ts', 'src/cli/**'],
    rules: {
      'no-restricted-properties': [
        'error',
        { object: 'process', property: 'env', message: 'src/config.ts is the only reader of process.env: take the value from the config' },
      ],
    },
  },

  // Errors: what a route, a protocol or the CLI answers is an AgentdFailure from src/errors.ts
  // (domainError, notFound, ...) carrying an AGT_ERR_* code, so a plain `throw new Error` there
  // is a 500. Where one cannot reach an answer (an internal invariant, a tool failure the model
  // reads, a config problem a caller wraps) an eslint-disable comment says why. Not here:
  // src/store/ (the bottom layer raises StoreError, which the error handler maps), the client
  // and the dashboard (other processes).
  {
    files: ['src/**/*.{ts,tsx}'],
    ignores: ['src/store/**', 'src/client/**', 'src/ui/**'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: "ThrowStatement > NewExpression[callee.name='Error']",
          message:
            'raise an AgentdFailure from src/errors.ts (domainError, notFound) so the answer carries an AGT_ERR_* code; a throw that cannot reach an answer says why in an eslint-disable comment',
        },
      ],
    },
  },

  // src/store/: the Store interface, its adapters and the typed repositories. Nothing above it
  // (a file of a subfolder such as src/store/repos/ may import src/store/ itself).
  {
    files: ['src/store/*.ts'],
    rules: {
      'no-restricted-imports': rule([forbid('^\\.\\./', 'src/store/ imports nothing else of src/ (it is the bottom layer)')]),
    },
  },
  {
    files: ['src/store/*/**/*.ts'],
    rules: {
      'no-restricted-imports': rule([forbid('^(\\.\\./){2,}', 'src/store/ imports nothing else of src/ (it is the bottom layer)')]),
    },
  },

  // Agent parts, telemetry, the scheduler: below the runtime.
  {
    files: ['src/agent/**/*.ts', 'src/telemetry/**/*.ts', 'src/calendar/**/*.ts', 'src/flow/**/*.ts'],
    rules: {
      'no-restricted-imports': rule([
        forbid(
          layer('http', 'protocols', 'runtime', 'background', 'integrations', 'cli', 'ui'),
          'agent/, telemetry/, calendar/ and flow/ sit below the runtime, the background manager and HTTP',
        ),
        forbid(rootFile('app', 'main', 'cli', 'composition-root'), 'the composition root imports these layers, not the other way round'),
      ]),
    },
  },

  // src/integrations/ (idempotency keys, webhooks): store, config, telemetry bus, errors.
  {
    files: ['src/integrations/**/*.ts'],
    rules: {
      'no-restricted-imports': rule([
        forbid(layer('http', 'protocols', 'runtime', 'background', 'cli', 'ui'), 'integrations/ sit below the runtime and HTTP'),
        forbid(rootFile('app', 'main', 'cli', 'composition-root'), 'the composition root imports these layers, not the other way round'),
      ]),
    },
  },

  // src/schemas/: zod schemas (validation, types, OpenAPI); no service of any layer.
  {
    files: ['src/schemas/**/*.ts'],
    rules: {
      'no-restricted-imports': rule([
        forbid(layer('http', 'protocols', 'runtime', 'background', 'integrations', 'store', 'cli', 'ui'), 'schemas/ describe data; they call no service'),
        forbid(rootFile('app', 'main', 'cli', 'composition-root'), 'the composition root imports these layers, not the other way round'),
      ]),
    },
  },

  // src/runtime/ (the run service) and src/background/ (which runs agent runs through it):
  // everything below them, never HTTP, and one direction only: background/ imports runtime/.
  {
    files: ['src/runtime/**/*.ts'],
    rules: {
      'no-restricted-imports': rule([
        forbid(layer('http', 'protocols', 'cli', 'ui'), 'runtime/ and background/ never import the HTTP layer (raise errors from src/errors.ts)'),
        forbid(layer('background'), 'runtime/ sits below background/: background/ imports runtime/, never the other way round'),
        forbid(rootFile('app', 'main', 'cli', 'composition-root'), 'the composition root imports these layers, not the other way round'),
      ]),
    },
  },
  {
    files: ['src/background/**/*.ts'],
    rules: {
      'no-restricted-imports': rule([
        forbid(layer('http', 'protocols', 'cli', 'ui'), 'runtime/ and background/ never import the HTTP layer (raise errors from src/errors.ts)'),
        forbid(rootFile('app', 'main', 'cli', 'composition-root'), 'the composition root imports these layers, not the other way round'),
      ]),
    },
  },

  // src/http/: routes over runtime services. The Store interface (src/store/store.ts) and the
  // adapters' shared helpers yes; an adapter, the code that opens one, or a storage library no.
  // src/protocols/ (the ecosystem protocols' routes) is HTTP too, under the same rule.
  {
    files: ['src/http/**/*.ts', 'src/protocols/**/*.ts'],
    rules: {
      'no-restricted-imports': rule(
        [
          forbid(
            '^(\\.\\./)+store/(level(-[\\w-]+)?|memory|postgres|pg-[\\w-]+|changes|open|migrations)([./]|$)',
            'src/http imports no store adapter: the Store interface (src/store/store.ts) instead',
          ),
          forbid(layer('cli', 'ui'), 'src/http does not import the CLI or the dashboard sources'),
          forbid(rootFile('main', 'cli'), 'the composition root imports HTTP, not the other way round'),
        ],
        ['level', 'classic-level', 'pg'].map((name) => ({ name, message: 'src/http imports no storage library' })),
      ),
    },
  },

  // src/app.ts builds the HTTP app: the same rule as src/http/ (it sits beside it, one level up).
  {
    files: ['src/app.ts'],
    rules: {
      'no-restricted-imports': rule(
        [
          forbid(
            '^\\./store/(level(-[\\w-]+)?|memory|postgres|pg-[\\w-]+|changes|open|migrations)([./]|$)',
            'src/app.ts imports no store adapter: the Store interface (src/store/store.ts) instead',
          ),
        ],
        ['level', 'classic-level', 'pg'].map((name) => ({ name, message: 'src/app.ts imports no storage library' })),
      ),
    },
  },

  // src/client/ (agentd/client) runs in other processes and browsers: its own files only.
  {
    files: ['src/client/**/*.ts'],
    rules: {
      'no-restricted-imports': rule([
        forbid('^\\.\\./', 'src/client imports nothing else of src/ (it is published as agentd/client)'),
        forbid('^node:', 'src/client runs in browsers too: no Node built-ins'),
      ]),
    },
  },

  // src/ui/ runs in the browser on the public HTTP API: preact, its own files, and src/client.
  {
    files: ['src/ui/**/*.{ts,tsx}'],
    rules: {
      'no-restricted-imports': rule([
        forbid('^\\.\\./(?!client/)', 'src/ui uses the public HTTP API: its own files and src/client only'),
        forbid('^(?!\\.|preact(/|$))', 'src/ui imports no library but preact'),
      ]),
    },
  },
);
