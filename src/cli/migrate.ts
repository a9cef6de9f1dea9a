// `agentd migrate`: applies the PostgreSQL store's pending migrations and exits, for operators who
// upgrade the schema as its own step (the service also migrates at start-up, under the same
// advisory lock, so running both at once is safe). The URL comes from --store-url, else
// AGENTD_STORE_URL, else store.url of the config file; it is never printed.
import { ConfigError, loadConfig } from '../config.js';
import { EXIT, type Parsed } from './args.js';
import { describeStoreUrl } from '../store/pg-url.js';

export async function migrateCommand(p: Parsed, _spec?: unknown, write: (s: string) => void = (s) => process.stdout.write(s)): Promise<number> {
  const flag = p.values['store-url'];
  let url: string | undefined;
  if (typeof flag === 'string') {
    if (!/^postgres(ql)?:\/\//i.test(flag)) throw new ConfigError(['--store-url: expected a postgres:// or postgresql:// connection string']);
    url = flag;
  } else {
    const config = loadConfig({ argv: typeof p.values.config === 'string' ? [`--config=${p.values.config}`] : [] });
    if (config.store.kind !== 'postgres' || !config.store.url) {
      throw new ConfigError([
        'store.url: agentd migrate needs a PostgreSQL store: --store-url URL, AGENTD_STORE_URL, or store.kind "postgres" with store.url in the config',
      ]);
    }
    url = config.store.url;
  }
  const [{ default: pg }, { migrate, latestSchemaVersion }] = await Promise.all([import('pg'), import('../store/pg-migrate.js')]);
  const pool = new pg.Pool({ connectionString: url, max: 1, connectionTimeoutMillis: 10_000, application_name: 'agentd migrate' });
  pool.on('error', () => {}); // an idle connection dropped by the server: the command fails on its next query instead
  try {
    const r = await migrate(pool, (msg) => write(`${msg}\n`));
    write(
      r.applied.length > 0
        ? `agentd: ${describeStoreUrl(url)} is at schema version ${r.version} (applied ${r.applied.join(', ')})\n`
        : `agentd: ${describeStoreUrl(url)} is already at schema version ${r.version} (the newest this agentd knows: ${latestSchemaVersion()})\n`,
    );
    return EXIT.ok;
  } finally {
    await pool.end().catch(() => {});
  }
}
