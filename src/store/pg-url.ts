/** host:port/database of a PostgreSQL connection string: what may be shown (never user or password). */
export function describeStoreUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || '5432'}${u.pathname}`;
  } catch {
    return '(unparseable URL)';
  }
}
