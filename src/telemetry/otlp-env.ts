// The standard OpenTelemetry exporter variables (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_*), turned
// into `telemetry.otlp` config values. Pure: config.ts, the only reader of process.env, hands the
// environment in and applies the result. They are fallbacks, like OTEL_EXPORTER_OTLP_ENDPOINT
// always was (docs/contract.md §8.2): a key the config file sets wins; the traces-specific variable
// wins over the general one, as the OTel exporter specification says.

export interface OtlpEnvValue {
  /** Path under the config root, e.g. ['telemetry', 'otlp', 'protocol']. */
  path: string[];
  value: unknown;
  /** The variable it came from, named in config errors. */
  label: string;
}

export interface OtlpEnvResult {
  values: OtlpEnvValue[];
  problems: string[];
}

const OTLP = ['telemetry', 'otlp'];

function envValue(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}

/** The first of `names` that is set, with its name. */
function firstSet(env: NodeJS.ProcessEnv, ...names: string[]): { name: string; value: string } | undefined {
  for (const name of names) {
    const value = envValue(env, name);
    if (value !== undefined) return { name, value };
  }
  return undefined;
}

/**
 * `OTEL_EXPORTER_OTLP_HEADERS` syntax (W3C baggage-like): `k1=v1,k2=v2`, names and values
 * percent-decoded, spaces around them trimmed. A malformed entry is an error, not skipped: a
 * collector's credential silently missing would only show up as 401s much later.
 */
export function parseOtlpHeaders(text: string): { headers: Record<string, string>; problems: string[] } {
  const headers: Record<string, string> = {};
  const problems: string[] = [];
  for (const raw of text.split(',')) {
    const entry = raw.trim();
    if (entry === '') continue;
    const eq = entry.indexOf('=');
    if (eq <= 0) {
      problems.push(`expected key=value pairs separated by commas, got "${entry.slice(0, 40)}${eq < 0 ? '' : '='}…"`);
      continue;
    }
    try {
      const name = decodeURIComponent(entry.slice(0, eq).trim());
      const value = decodeURIComponent(entry.slice(eq + 1).trim());
      if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) {
        problems.push(`"${name.slice(0, 40)}" is not a valid header name`);
        continue;
      }
      headers[name.toLowerCase()] = value;
    } catch {
      // The value may be a credential: name the entry by its key only.
      problems.push(`bad percent-encoding in the entry for "${entry.slice(0, Math.min(eq, 40))}"`);
    }
  }
  return { headers, problems };
}

/**
 * Config values from the OTel variables. `fileSets(path)` says whether the config file set a key;
 * such keys are left alone (headers: per header name).
 */
export function otlpEnvValues(env: NodeJS.ProcessEnv, fileSets: (path: string[]) => boolean): OtlpEnvResult {
  const values: OtlpEnvValue[] = [];
  const problems: string[] = [];
  const add = (key: string, value: unknown, label: string): void => {
    if (!fileSets([...OTLP, key])) values.push({ path: [...OTLP, key], value, label });
  };

  // An endpoint in the file (either form) is the whole destination: no variable redirects it.
  if (!fileSets([...OTLP, 'endpoint']) && !fileSets([...OTLP, 'traces_endpoint'])) {
    const traces = envValue(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
    const base = envValue(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
    if (traces !== undefined) add('traces_endpoint', traces, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
    if (base !== undefined) add('endpoint', base, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  }

  const protocol = firstSet(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL');
  if (protocol) add('protocol', protocol.value, protocol.name);

  const timeout = firstSet(env, 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', 'OTEL_EXPORTER_OTLP_TIMEOUT');
  if (timeout) add('timeout_ms', /^\d+$/.test(timeout.value) ? Number(timeout.value) : timeout.value, timeout.name);

  // The GenAI conventions' opt-in for message content: "true"/"false" (any case); anything else is
  // passed on as text, so the config check names the variable and refuses it.
  const content = envValue(env, 'OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT');
  if (content !== undefined)
    add(
      'capture_message_content',
      /^(true|false)$/i.test(content) ? content.toLowerCase() === 'true' : content,
      'OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT',
    );

  const service = envValue(env, 'OTEL_SERVICE_NAME');
  if (service !== undefined) add('service_name', service, 'OTEL_SERVICE_NAME');

  // General headers first, then the traces-specific ones over them (same name: traces wins).
  for (const name of ['OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_EXPORTER_OTLP_TRACES_HEADERS']) {
    const text = envValue(env, name);
    if (text === undefined) continue;
    const parsed = parseOtlpHeaders(text);
    for (const p of parsed.problems) problems.push(`telemetry.otlp.headers (from ${name}): ${p}`);
    for (const [header, value] of Object.entries(parsed.headers)) {
      if (fileSets([...OTLP, 'headers', header])) continue;
      const path = [...OTLP, 'headers', header];
      const i = values.findIndex((v) => v.path.join('\0') === path.join('\0'));
      if (i >= 0) values.splice(i, 1);
      values.push({ path, value, label: name });
    }
  }
  return { values, problems };
}
