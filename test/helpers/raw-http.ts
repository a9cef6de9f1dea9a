// HTTP/1.1 over a raw socket, for requests fetch would normalise or refuse to send: encoded and
// dot-segment paths, absolute-form targets, half-sent headers, oversized headers, garbage.
import net from 'node:net';

export interface RawAnswer {
  /** 0 when the server closed without answering. */
  status: number;
  headers: Record<string, string>;
  body: string;
  /** True when the server closed the connection (as opposed to our timeout). */
  closedByServer: boolean;
}

export interface RawOptions {
  /** Give up (and destroy the socket) after this long. Default 5 s. */
  timeoutMs?: number;
  /** Resolve as soon as the status line and headers arrived (SSE responses never end). */
  headersOnly?: boolean;
}

export function rawRequest(port: number, request: string, opts: RawOptions = {}): Promise<RawAnswer> {
  // requestText's default Host gets the port, as a client would send it: a server bound to
  // loopback with auth off answers only its own names on its own port (server.allowed_hosts).
  const text = request.replace(/^(\S+ \S+ HTTP\/1\.1\r\n(?:[^\r\n]+\r\n)*?)host: localhost\r\n/i, `$1host: localhost:${port}\r\n`);
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(text));
    let buf = '';
    let settled = false;
    const finish = (closedByServer: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(parseAnswer(buf, closedByServer));
    };
    const timer = setTimeout(() => finish(false), opts.timeoutMs ?? 5000);
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      buf += d;
      if (opts.headersOnly && buf.includes('\r\n\r\n')) finish(false);
    });
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true));
  });
}

function parseAnswer(text: string, closedByServer: boolean): RawAnswer {
  const end = text.indexOf('\r\n\r\n');
  const head = end === -1 ? text : text.slice(0, end);
  const lines = head.split('\r\n');
  const m = /^HTTP\/1\.1 (\d{3})/.exec(lines[0] ?? '');
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  let body = end === -1 ? '' : text.slice(end + 4);
  if (headers['transfer-encoding'] === 'chunked') body = dechunk(body);
  return { status: m ? Number(m[1]) : 0, headers, body, closedByServer };
}

function dechunk(body: string): string {
  let out = '';
  let rest = body;
  for (;;) {
    const nl = rest.indexOf('\r\n');
    if (nl === -1) return out + rest;
    const size = parseInt(rest.slice(0, nl), 16);
    if (!Number.isFinite(size) || size === 0) return out;
    out += rest.slice(nl + 2, nl + 2 + size);
    rest = rest.slice(nl + 2 + size + 2);
  }
}

/** A complete request text. `target` is sent exactly as given. */
export function requestText(method: string, target: string, opts: { headers?: Record<string, string>; body?: string } = {}): string {
  const headers: Record<string, string> = { host: 'localhost', connection: 'close', ...(opts.headers ?? {}) };
  if (opts.body !== undefined) {
    headers['content-type'] ??= 'application/json';
    headers['content-length'] = String(Buffer.byteLength(opts.body));
  }
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}`);
  return `${method} ${target} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n${opts.body ?? ''}`;
}
