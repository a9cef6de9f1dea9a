// A local OTLP/HTTP traces receiver for tests: accepts `http/protobuf` and `http/json` export
// requests, decodes both into one shape, and records the request's path and headers.
//
// The protobuf side is decoded here, independently of the exporter's encoder, with a plain
// protobuf wire-format reader and the field numbers of opentelemetry-proto
// (opentelemetry/proto/collector/trace/v1/trace_service.proto, trace/v1/trace.proto,
// common/v1/common.proto, resource/v1/resource.proto). Unknown fields are skipped.
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export type OtlpValue = string | number | boolean | OtlpValue[] | { [key: string]: OtlpValue } | null;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 INTERNAL, 2 SERVER, 3 CLIENT, 4 PRODUCER, 5 CONSUMER. */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, OtlpValue>;
  events: Array<{ name: string; timeNs: bigint; attributes: Record<string, OtlpValue> }>;
  links: Array<{ traceId: string; spanId: string; attributes: Record<string, OtlpValue> }>;
  /** OTLP StatusCode: 0 UNSET, 1 OK, 2 ERROR. */
  status: { code: number; message: string };
  resource: Record<string, OtlpValue>;
  scope: string;
}

export interface ReceivedRequest {
  path: string;
  contentType: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  spans: ReceivedSpan[];
}

export interface OtlpReceiver {
  url: string;
  requests: ReceivedRequest[];
  spans(): ReceivedSpan[];
  close(): Promise<void>;
}

// ------------------------------------------------------------------ protobuf wire format

interface Field {
  no: number;
  wire: number;
  /** varint as bigint, fixed64 as bigint, fixed32 as number, length-delimited as bytes. */
  value: bigint | number | Buffer;
}

function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  let pos = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      if (pos >= buf.length) throw new Error('truncated varint');
      const b = buf[pos++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  while (pos < buf.length) {
    const tag = Number(varint());
    const no = tag >>> 3;
    const wire = tag & 7;
    if (wire === 0) out.push({ no, wire, value: varint() });
    else if (wire === 1) {
      out.push({ no, wire, value: buf.readBigUInt64LE(pos) });
      pos += 8;
    } else if (wire === 2) {
      const len = Number(varint());
      if (pos + len > buf.length) throw new Error('truncated length-delimited field');
      out.push({ no, wire, value: buf.subarray(pos, pos + len) });
      pos += len;
    } else if (wire === 5) {
      out.push({ no, wire, value: buf.readUInt32LE(pos) });
      pos += 4;
    } else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

const bytesOf = (f: Field): Buffer => f.value as Buffer;
const textOf = (f: Field): string => bytesOf(f).toString('utf8');
const all = (fs: Field[], no: number): Field[] => fs.filter((f) => f.no === no);
const one = (fs: Field[], no: number): Field | undefined => fs.find((f) => f.no === no);

/** AnyValue: 1 string, 2 bool, 3 int64, 4 double, 5 ArrayValue{1 values}, 6 KeyValueList{1 values}, 7 bytes. */
function anyValue(buf: Buffer): OtlpValue {
  const f = fields(buf)[0];
  if (!f) return null;
  switch (f.no) {
    case 1:
      return textOf(f);
    case 2:
      return (f.value as bigint) !== 0n;
    case 3:
      return Number(BigInt.asIntN(64, f.value as bigint));
    case 4: {
      const b = Buffer.alloc(8);
      b.writeBigUInt64LE(f.value as bigint);
      return b.readDoubleLE(0);
    }
    case 5:
      return all(fields(bytesOf(f)), 1).map((v) => anyValue(bytesOf(v)));
    case 6:
      return keyValues(all(fields(bytesOf(f)), 1));
    case 7:
      return bytesOf(f).toString('hex');
    default:
      return null;
  }
}

/** KeyValue: 1 key, 2 value (AnyValue). */
function keyValues(list: Field[]): Record<string, OtlpValue> {
  const out: Record<string, OtlpValue> = {};
  for (const kv of list) {
    const fs = fields(bytesOf(kv));
    const k = one(fs, 1);
    const v = one(fs, 2);
    if (k) out[textOf(k)] = v ? anyValue(bytesOf(v)) : null;
  }
  return out;
}

/**
 * ExportTraceServiceRequest: 1 ResourceSpans{1 Resource{1 attributes}, 2 ScopeSpans{1 scope{1 name},
 * 2 Span}}. Span: 1 trace_id, 2 span_id, 4 parent_span_id, 5 name, 6 kind, 7 start (fixed64),
 * 8 end (fixed64), 9 attributes, 11 Event{1 time, 2 name, 3 attributes}, 13 Link{1 trace_id,
 * 2 span_id, 4 attributes}, 15 Status{2 message, 3 code}.
 */
export function decodeProtobufTraces(body: Buffer): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const rs of all(fields(body), 1)) {
    const rsf = fields(bytesOf(rs));
    const res = one(rsf, 1);
    const resource = res ? keyValues(all(fields(bytesOf(res)), 1)) : {};
    for (const ss of all(rsf, 2)) {
      const ssf = fields(bytesOf(ss));
      const scopeField = one(ssf, 1);
      const scopeName = scopeField ? one(fields(bytesOf(scopeField)), 1) : undefined;
      for (const sp of all(ssf, 2)) {
        const f = fields(bytesOf(sp));
        const hex = (no: number) => (one(f, no) ? bytesOf(one(f, no)!).toString('hex') : '');
        const status = one(f, 15) ? fields(bytesOf(one(f, 15)!)) : [];
        spans.push({
          traceId: hex(1),
          spanId: hex(2),
          parentSpanId: hex(4),
          name: one(f, 5) ? textOf(one(f, 5)!) : '',
          kind: Number((one(f, 6)?.value as bigint | undefined) ?? 0n),
          startNs: (one(f, 7)?.value as bigint | undefined) ?? 0n,
          endNs: (one(f, 8)?.value as bigint | undefined) ?? 0n,
          attributes: keyValues(all(f, 9)),
          events: all(f, 11).map((e) => {
            const ef = fields(bytesOf(e));
            return {
              timeNs: (one(ef, 1)?.value as bigint | undefined) ?? 0n,
              name: one(ef, 2) ? textOf(one(ef, 2)!) : '',
              attributes: keyValues(all(ef, 3)),
            };
          }),
          links: all(f, 13).map((l) => {
            const lf = fields(bytesOf(l));
            const lhex = (no: number) => (one(lf, no) ? bytesOf(one(lf, no)!).toString('hex') : '');
            return { traceId: lhex(1), spanId: lhex(2), attributes: keyValues(all(lf, 4)) };
          }),
          status: {
            message: one(status, 2) ? textOf(one(status, 2)!) : '',
            code: Number((one(status, 3)?.value as bigint | undefined) ?? 0n),
          },
          resource,
          scope: scopeName ? textOf(scopeName) : '',
        });
      }
    }
  }
  return spans;
}

// ------------------------------------------------------------------ OTLP/JSON

type JsonAny = {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: JsonAny[] };
  kvlistValue?: { values?: JsonKv[] };
  bytesValue?: string;
};
type JsonKv = { key: string; value?: JsonAny };

function jsonValue(v: JsonAny | undefined): OtlpValue {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(jsonValue);
  if (v.kvlistValue) return jsonAttrs(v.kvlistValue.values);
  if (v.bytesValue !== undefined) return Buffer.from(v.bytesValue, 'base64').toString('hex');
  return null;
}

function jsonAttrs(list: JsonKv[] | undefined): Record<string, OtlpValue> {
  const out: Record<string, OtlpValue> = {};
  for (const kv of list ?? []) out[kv.key] = jsonValue(kv.value);
  return out;
}

/** OTLP/JSON: ids are hex strings, times decimal strings, kinds and codes numbers. */
export function decodeJsonTraces(body: Buffer): ReceivedSpan[] {
  const doc = JSON.parse(body.toString('utf8')) as { resourceSpans?: any[] };
  const spans: ReceivedSpan[] = [];
  for (const rs of doc.resourceSpans ?? []) {
    const resource = jsonAttrs(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        spans.push({
          traceId: s.traceId ?? '',
          spanId: s.spanId ?? '',
          parentSpanId: s.parentSpanId ?? '',
          name: s.name ?? '',
          kind: s.kind ?? 0,
          startNs: BigInt(s.startTimeUnixNano ?? 0),
          endNs: BigInt(s.endTimeUnixNano ?? 0),
          attributes: jsonAttrs(s.attributes),
          events: (s.events ?? []).map((e: any) => ({ name: e.name ?? '', timeNs: BigInt(e.timeUnixNano ?? 0), attributes: jsonAttrs(e.attributes) })),
          links: (s.links ?? []).map((l: any) => ({ traceId: l.traceId ?? '', spanId: l.spanId ?? '', attributes: jsonAttrs(l.attributes) })),
          status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
          resource,
          scope: ss.scope?.name ?? '',
        });
      }
    }
  }
  return spans;
}

// ------------------------------------------------------------------ the receiver

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const requests: ReceivedRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const contentType = String(req.headers['content-type'] ?? '');
      let spans: ReceivedSpan[];
      try {
        spans = contentType.includes('json') ? decodeJsonTraces(body) : decodeProtobufTraces(body);
      } catch (err) {
        res.writeHead(400, { 'content-type': 'text/plain' });
        res.end(String(err));
        return;
      }
      requests.push({ path: req.url ?? '', contentType, headers: req.headers, body, spans });
      // An empty ExportTraceServiceResponse is a success in both encodings.
      if (contentType.includes('json')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      } else {
        res.writeHead(200, { 'content-type': 'application/x-protobuf' });
        res.end();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    spans: () => requests.flatMap((r) => r.spans),
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
