// Host header values and the config's `server.allowed_hosts` entries, read one way by both the
// config check (src/config-schema.ts) and the HTTP check (src/http/host-check.ts).

/** `name` or `name:port` (IPv6 as `[::1]` or `[::1]:port`), lower-cased; null when malformed. */
export function parseHost(text: string): { name: string; port: number | null } | null {
  const m = /^(\[[0-9a-f:.]+\]|[^[\]:/\s]+)(?::(\d{1,5}))?$/.exec(text.trim().toLowerCase());
  if (!m) return null;
  return { name: m[1], port: m[2] !== undefined ? Number(m[2]) : null };
}

/** Whether a config entry reads as a host, or is "*" (any). */
export function isHostEntry(text: string): boolean {
  return text === '*' || parseHost(text) !== null;
}
