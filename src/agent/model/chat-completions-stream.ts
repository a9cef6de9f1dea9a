// One streamed Chat Completions call over node:http, read as a Node stream: the request goes out
// on the model host's shared keep-alive agent (node-fetch.ts), the body's bytes go through a
// StringDecoder, our SSE parser (sse-parser.ts) and the chunk decoder (chat-completions-decoder.ts).
// It replaces, for the openai-compatible provider's streaming calls, the AI SDK's doStream, whose
// per-call chain (fetch Response → ReadableStream → TextDecoderStream → EventSourceParserStream →
// TransformStreams) held ~49 KB of heap per live stream and most of a call's CPU
// (docs/benchmarks.md). Failures come out as the SDK path's do after toModelCallError: an HTTP
// error answer as httpStatusError (status kind, Retry-After, the API's message), socket failures
// as connectionError, the caller's abort as the signal's reason, bad stream data as the decoder's
// ChatStreamDataError.
import http from 'node:http';
import https from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import { ChatCompletionsDecoder, type ChatCompletionsResult } from './chat-completions-decoder.js';
import { connectionError, httpStatusError } from './errors.js';
import type { ModelHttpAgents } from './node-fetch.js';
import { SseParser } from './sse-parser.js';

export interface ChatCompletionsStreamOptions {
  /** The API base URL (…/v1); `/chat/completions` is appended as the SDK appends it. */
  baseURL: string;
  apiKey?: string;
  agents: ModelHttpAgents;
}

/** An error answer's body is read up to this size (a summary of its message is all we keep). */
const MAX_ERROR_BODY = 64 * 1024;

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

function headerRecord(h: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

/** The API's own message from an error body (`{"error":{"message":…}}`), else the status text. */
function errorMessage(body: string, statusText: string): string {
  if (body.trim() === '') return statusText;
  try {
    const parsed: unknown = JSON.parse(body);
    const e = (parsed as { error?: { message?: unknown } } | null)?.error;
    if (typeof e?.message === 'string') return e.message;
  } catch {
    // Not JSON: the status text, as the SDK's error handler does.
  }
  return statusText;
}

/** A body cut mid-stream, as Node's fetch reports it (node-fetch.ts does the same). */
const cutBody = (cause?: unknown): TypeError =>
  new TypeError('terminated', { cause: cause ?? Object.assign(new Error('other side closed'), { code: 'ECONNRESET' }) });

export class ChatCompletionsStream {
  private readonly target: URL;
  private readonly secure: boolean;
  private readonly headers: Readonly<Record<string, string>>;

  constructor(private readonly opts: ChatCompletionsStreamOptions) {
    this.target = new URL(`${opts.baseURL.replace(/\/$/, '')}/chat/completions`);
    this.secure = this.target.protocol === 'https:';
    // eslint-disable-next-line no-restricted-syntax -- a model config problem: agent-registry.ts answers it as 422/409, at start-up the CLI prints it
    if (!this.secure && this.target.protocol !== 'http:') throw new Error(`model.base_url must be http(s): ${opts.baseURL}`);
    // What the SDK's provider sends (content-type, the bearer key), named for what it is.
    this.headers = {
      'content-type': 'application/json',
      ...(opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {}),
      'user-agent': `agentd runtime/node.js/${process.version}`,
    };
  }

  /** Posts `body` (chat-completions-body.ts) and streams the answer; `onText` gets each text delta. */
  call(
    body: string,
    signal: AbortSignal | undefined,
    onText: (text: string) => void,
    toArguments: (input: unknown) => Record<string, unknown>,
  ): Promise<ChatCompletionsResult> {
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    const req = this.send(body);
    return new Promise<ChatCompletionsResult>((resolve, reject) => {
      let res: http.IncomingMessage | undefined;
      let settled = false;
      const settle = (err: unknown, result?: ChatCompletionsResult): void => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener('abort', onAbort);
        if (result !== undefined) {
          resolve(result);
          return;
        }
        // The socket is not reusable mid-answer: drop it rather than read the rest.
        if (res) res.destroy();
        req.destroy();
        reject(err);
      };
      const onAbort = (): void => settle(abortReason(signal!));
      signal?.addEventListener('abort', onAbort, { once: true });

      req.on('error', (err) => {
        if (res) settle(connectionError('Failed to process successful response', cutBody(err)));
        else settle(connectionError(`Cannot connect to API: ${err.message}`, err));
      });
      req.on('response', (response) => {
        res = response;
        const status = response.statusCode ?? 0;
        if (status < 200 || status > 299) this.readError(response, settle);
        else this.readStream(response, onText, toArguments, settle);
      });
    });
  }

  /**
   * Sends the request. Apart from call() so the closures that live as long as the answer streams
   * do not keep the request body (a whole conversation) reachable.
   */
  private send(body: string): http.ClientRequest {
    const req = (this.secure ? https : http).request(this.target, {
      method: 'POST',
      headers: { ...this.headers, 'content-length': String(Buffer.byteLength(body)) },
      agent: this.secure ? this.opts.agents.https : this.opts.agents.http,
    });
    req.end(body);
    return req;
  }

  private readError(res: http.IncomingMessage, settle: (err: unknown) => void): void {
    const status = res.statusCode ?? 0;
    const chunks: Buffer[] = [];
    let size = 0;
    res.on('data', (chunk: Buffer) => {
      if (size < MAX_ERROR_BODY) chunks.push(chunk);
      size += chunk.length;
    });
    res.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      settle(httpStatusError(status, errorMessage(body, res.statusMessage ?? ''), headerRecord(res.headers)));
    });
    res.on('error', (err) => settle(connectionError('Failed to process error response', cutBody(err))));
    res.on('close', () => {
      if (!res.complete) settle(connectionError('Failed to process error response', cutBody()));
    });
  }

  private readStream(
    res: http.IncomingMessage,
    onText: (text: string) => void,
    toArguments: (input: unknown) => Record<string, unknown>,
    settle: (err: unknown, result?: ChatCompletionsResult) => void,
  ): void {
    const decoder = new ChatCompletionsDecoder(onText, toArguments);
    const sse = new SseParser((data) => decoder.push(data));
    const utf8 = new StringDecoder('utf8');
    res.on('data', (chunk: Buffer) => {
      try {
        sse.feed(utf8.write(chunk));
      } catch (err) {
        settle(err);
      }
    });
    res.on('end', () => {
      try {
        sse.feed(utf8.end());
        settle(undefined, decoder.finish());
      } catch (err) {
        settle(err);
      }
    });
    res.on('error', (err) => settle(connectionError('Failed to process successful response', cutBody(err))));
    res.on('close', () => {
      if (!res.complete) settle(connectionError('Failed to process successful response', cutBody()));
    });
  }
}
