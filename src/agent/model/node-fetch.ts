// The `fetch` the model providers use: the plain request a provider makes (a POST with a JSON
// string body, headers as an object, an abort signal) over node:http(s) with a keep-alive agent,
// answered with a standard Response. Node's built-in fetch (undici) costs about as much CPU per
// model call as the rest of a short run's own work (docs/benchmarks.md, "Profiles"); this does the
// same request with a fraction of it. Anything else (a Request object, a non-string body) goes to
// the built-in fetch. Errors look like the built-in fetch's, so the providers and
// toModelCallError classify them the same: TypeError('fetch failed', {cause}) before a response,
// TypeError('terminated', {cause}) when the body is cut, the signal's reason on abort.
import http from 'node:http';
import https from 'node:https';

export interface NodeFetchOptions {
  /** Sockets per model host (a bound: more requests wait for one). Default 256: model streams past it wait for a socket (each open one holds ~0.3 MB). */
  maxSockets?: number;
  /** Idle keep-alive sockets kept per host. Default 64. */
  maxFreeSockets?: number;
}

type FetchArgs = Parameters<typeof fetch>;

const NULL_BODY_STATUS = new Set([101, 204, 205, 304]);

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

function headerObject(h: NonNullable<FetchArgs[1]>['headers']): Record<string, string> | null {
  if (h === undefined) return {};
  if (h instanceof Headers) return Object.fromEntries(h.entries());
  if (Array.isArray(h)) return null;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = String(v);
  return out;
}

/** The keep-alive agents model calls share (the fetch below and chat-completions-stream.ts). */
export interface ModelHttpAgents {
  http: http.Agent;
  https: https.Agent;
}

export function createModelHttpAgents(opts: NodeFetchOptions = {}): ModelHttpAgents {
  const agentOpts = { keepAlive: true, maxSockets: opts.maxSockets ?? 256, maxFreeSockets: opts.maxFreeSockets ?? 64 };
  return { http: new http.Agent(agentOpts), https: new https.Agent(agentOpts) };
}

/** `agents`: share sockets with another client of the same model host (default: its own). */
export function createNodeFetch(opts: NodeFetchOptions = {}, agents: ModelHttpAgents = createModelHttpAgents(opts)): typeof fetch {
  const httpAgent = agents.http;
  const httpsAgent = agents.https;

  return function nodeFetch(input: FetchArgs[0], init?: FetchArgs[1]): Promise<Response> {
    const body = init?.body;
    const headers = headerObject(init?.headers);
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : null;
    if (url === null || headers === null || (body !== undefined && body !== null && typeof body !== 'string')) return fetch(input, init);
    const target = new URL(url);
    const secure = target.protocol === 'https:';
    if (!secure && target.protocol !== 'http:') return fetch(input, init);
    const signal = init?.signal ?? undefined;
    if (signal?.aborted) return Promise.reject(abortReason(signal));

    return new Promise<Response>((resolve, reject) => {
      if (typeof body === 'string' && !Object.keys(headers).some((k) => k.toLowerCase() === 'content-length')) {
        headers['content-length'] = String(Buffer.byteLength(body));
      }
      const req = (secure ? https : http).request(target, {
        method: init?.method ?? 'GET',
        headers,
        agent: secure ? httpsAgent : httpAgent,
      });
      let settled = false;
      let fail: ((err: unknown) => void) | null = null;
      const onAbort = (): void => {
        const reason = abortReason(signal!);
        if (!settled) {
          settled = true;
          reject(reason);
        } else fail?.(reason);
        req.destroy();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const done = (): void => signal?.removeEventListener('abort', onAbort);

      req.on('error', (err) => {
        if (!settled) {
          settled = true;
          done();
          reject(new TypeError('fetch failed', { cause: err }));
        } else fail?.(new TypeError('terminated', { cause: err }));
      });
      req.on('response', (res) => {
        settled = true;
        const h = new Headers();
        const raw = res.rawHeaders;
        for (let i = 0; i + 1 < raw.length; i += 2) h.append(raw[i], raw[i + 1]);
        const status = res.statusCode ?? 0;
        if (NULL_BODY_STATUS.has(status) || init?.method === 'HEAD') {
          res.resume();
          done();
          resolve(new Response(null, { status, statusText: res.statusMessage, headers: h }));
          return;
        }
        let closed = false;
        // Pull-based: the socket pauses while one chunk waits unread (the stream's bound).
        const stream = new ReadableStream<Uint8Array>(
          {
            start(controller) {
              fail = (err) => {
                if (closed) return;
                closed = true;
                done();
                controller.error(err);
              };
              res.on('data', (chunk: Buffer) => {
                if (closed) return;
                controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
                if ((controller.desiredSize ?? 0) <= 0) res.pause();
              });
              res.on('end', () => {
                if (closed) return;
                closed = true;
                done();
                controller.close();
              });
              res.on('aborted', () => fail?.(new TypeError('terminated', { cause: Object.assign(new Error('other side closed'), { code: 'ECONNRESET' }) })));
              res.on('error', (err) => fail?.(new TypeError('terminated', { cause: err })));
              res.on('close', () => {
                if (!res.complete) fail?.(new TypeError('terminated', { cause: Object.assign(new Error('other side closed'), { code: 'ECONNRESET' }) }));
              });
            },
            pull() {
              res.resume();
            },
            cancel() {
              closed = true;
              done();
              res.destroy();
            },
          },
          { highWaterMark: 1 },
        );
        resolve(new Response(stream, { status, statusText: res.statusMessage, headers: h }));
      });
      if (typeof body === 'string') req.end(body);
      else req.end();
    });
  } as typeof fetch;
}
