// The OTEL_* exporter variables: parsing (pure) and how they meet the config file (configFromObject,
// which receives the environment; config.ts is the only reader of process.env).
import { describe, expect, it } from 'vitest';
import { ConfigError, configFromObject } from '../../src/config.js';
import { parseOtlpHeaders } from '../../src/telemetry/otlp-env.js';
import { configuredSecrets, redactorForConfig } from '../../src/telemetry/secrets.js';

const otlpOf = (file: Record<string, unknown>, env: Record<string, string>) => configFromObject(file, { env, dataDir: '/tmp/agentd-otlp-env' }).telemetry.otlp;
const problemsOf = (file: Record<string, unknown>, env: Record<string, string>): string[] => {
  try {
    configFromObject(file, { env, dataDir: '/tmp/agentd-otlp-env' });
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
};

describe('parseOtlpHeaders', () => {
  it('splits on commas, trims, percent-decodes names and values, lower-cases names', () => {
    expect(parseOtlpHeaders(' API-Key = a%3Db%2Cc , x-tenant=acme,,x-empty=')).toEqual({
      headers: { 'api-key': 'a=b,c', 'x-tenant': 'acme', 'x-empty': '' },
      problems: [],
    });
  });
  it('a value may hold "=" unencoded (split at the first one)', () => {
    expect(parseOtlpHeaders('authorization=Basic dXNlcjpwYXNz==').headers).toEqual({ authorization: 'Basic dXNlcjpwYXNz==' });
  });
  it('reports malformed pairs without quoting a value', () => {
    const r = parseOtlpHeaders('novalue,=v,bad name=x,k=%E0%A4%A');
    expect(r.headers).toEqual({});
    expect(r.problems).toHaveLength(4);
    expect(r.problems.join(' ')).not.toContain('%E0%A4%A');
  });
});

describe('telemetry.otlp from OTEL_* variables', () => {
  it('defaults: no endpoint, http/protobuf, 10 s, service agentd', () => {
    expect(otlpOf({}, {})).toEqual({ headers: {}, protocol: 'http/protobuf', timeout_ms: 10_000, service_name: 'agentd', capture_message_content: false });
  });

  it('fills every key from the variables, the traces-specific ones winning', () => {
    expect(
      otlpOf(
        {},
        {
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
          OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/custom',
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
          OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
          OTEL_EXPORTER_OTLP_TIMEOUT: '3000',
          OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '2500',
          OTEL_EXPORTER_OTLP_HEADERS: 'x-a=general,x-b=general',
          OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-b=traces',
          OTEL_SERVICE_NAME: 'svc',
          OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'TRUE',
        },
      ),
    ).toEqual({
      endpoint: 'http://c:4318',
      traces_endpoint: 'http://c:4318/custom',
      protocol: 'http/json',
      timeout_ms: 2500,
      headers: { 'x-a': 'general', 'x-b': 'traces' },
      service_name: 'svc',
      capture_message_content: true,
    });
  });

  it('the config file wins, key by key (headers name by name, case-insensitively)', () => {
    const env = {
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://env:4318/v1/traces',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=from-env,x-extra=env',
      OTEL_SERVICE_NAME: 'from-env',
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true',
    };
    const o = otlpOf(
      {
        telemetry: {
          otlp: {
            endpoint: 'http://file:4318',
            protocol: 'http/protobuf',
            headers: { 'X-Api-Key': 'from-file' },
            service_name: 'from-file',
            capture_message_content: false,
          },
        },
      },
      env,
    );
    // An endpoint in the file is the destination: the traces variable does not redirect it.
    expect(o).toEqual({
      endpoint: 'http://file:4318',
      protocol: 'http/protobuf',
      headers: { 'X-Api-Key': 'from-file', 'x-extra': 'env' },
      timeout_ms: 10_000,
      service_name: 'from-file',
      capture_message_content: false,
    });
  });

  it('bad values are config errors that name the variable', () => {
    expect(problemsOf({}, { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toEqual([
      expect.stringMatching(/^telemetry\.otlp\.protocol \(from OTEL_EXPORTER_OTLP_PROTOCOL\): expected one of "http\/protobuf", "http\/json"/),
    ]);
    expect(problemsOf({}, { OTEL_EXPORTER_OTLP_TIMEOUT: '10s' })[0]).toContain('(from OTEL_EXPORTER_OTLP_TIMEOUT)');
    expect(problemsOf({}, { OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'yes' })[0]).toContain(
      '(from OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)',
    );
    expect(problemsOf({}, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'not a url' })[0]).toContain('(from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)');
    expect(problemsOf({}, { OTEL_EXPORTER_OTLP_HEADERS: 'x-key' })[0]).toMatch(/^telemetry\.otlp\.headers \(from OTEL_EXPORTER_OTLP_HEADERS\): /);
  });

  it('header values from the environment are configured secrets, redacted like the file ones', () => {
    const config = configFromObject(
      {},
      {
        env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'authorization=Bearer%20zq9-env-collector-token' },
        dataDir: '/tmp/agentd-otlp-env',
      },
    );
    expect(configuredSecrets(config)).toEqual(expect.arrayContaining(['Bearer zq9-env-collector-token', 'zq9-env-collector-token']));
    expect(redactorForConfig(config).text('the collector said zq9-env-collector-token was wrong')).not.toContain('zq9-env-collector-token');
  });
});
