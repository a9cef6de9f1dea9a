// Pure pieces behind the OpenAPI document and the client: the component de-duplication
// (src/http/openapi.ts finishDocument) and the SSE frame reader (src/client/sse.ts).
import { describe, expect, it } from 'vitest';
import { finishDocument } from '../../src/http/openapi.js';
import { readSseFrames } from '../../src/client/sse.js';

const ref = (n: string) => ({ $ref: `#/components/schemas/${n}` });

describe('finishDocument', () => {
  const doc = () => ({
    openapi: '3.1.0',
    info: { title: 't', version: '1' },
    paths: {
      '/a': {
        post: {
          requestBody: { content: { 'application/json': { schema: ref('ReqInput') } } },
          responses: {
            200: { description: 'Default Response', content: { 'application/json': { schema: ref('Res') } } },
            404: { description: 'Default Response', content: { 'application/json': { schema: ref('Err') } } },
          },
        },
      },
      '/b': {
        post: {
          requestBody: { content: { 'application/json': { schema: ref('PolicyInput') } } },
          responses: { 200: { description: 'ok', content: { 'application/json': { schema: ref('Policy') } } } },
        },
      },
    },
    components: {
      schemas: {
        // identical twins: one name
        Same: { type: 'string' },
        SameInput: { type: 'string' },
        // equal only once the refs to merged twins are renamed
        Req: { type: 'object', properties: { s: ref('Same') } },
        ReqInput: { type: 'object', properties: { s: ref('SameInput') } },
        Res: { type: 'object', properties: { s: ref('Same') } },
        ResInput: { type: 'object', properties: { s: ref('SameInput') } },
        // really different by direction (a default): both kept
        Policy: { type: 'object', required: ['n'], properties: { n: { type: 'number', default: 1 } } },
        PolicyInput: { type: 'object', properties: { n: { type: 'number', default: 1 } } },
        Err: { type: 'object' },
        ErrInput: { type: 'object' },
        Unused: { type: 'number' },
        UnusedInput: { type: 'number' },
      },
    },
  });

  it('keeps each schema once, both forms only where they differ, and nothing unreferenced', () => {
    const out = finishDocument(doc()) as any;
    expect(Object.keys(out.components.schemas)).toEqual(['Err', 'Policy', 'PolicyInput', 'Req', 'Res', 'Same']);
    expect(out.paths['/a'].post.requestBody.content['application/json'].schema).toEqual(ref('Req'));
    expect(out.components.schemas.Req.properties.s).toEqual(ref('Same'));
    expect(out.paths['/b'].post.requestBody.content['application/json'].schema).toEqual(ref('PolicyInput'));
  });

  it('names answers by their status, and adds servers and a license', () => {
    const out = finishDocument(doc()) as any;
    expect(out.paths['/a'].post.responses['200'].description).toBe('OK');
    expect(out.paths['/a'].post.responses['404'].description).toBe('Not Found');
    expect(out.servers).toEqual([expect.objectContaining({ url: '/' })]);
    expect(out.info.license).toEqual({ name: 'MIT', identifier: 'MIT' });
  });
});

function body(...chunks: string[]): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(enc.encode(ch));
      c.close();
    },
  });
}

describe('readSseFrames', () => {
  it('parses frames split across chunks, CRLF lines, multi-line data, comments and retry hints', async () => {
    const frames = [];
    for await (const f of readSseFrames(
      body(
        ': ping\n\nretry: 3000\n\nevent: sess',
        'ion\ndata: {"a":1}\n\n',
        'id: 7\r\nevent: tool_call\r\ndata: {"b":\r\ndata: 2}\r\n\r\n',
        'data: x\n\n',
        'event: half\ndata: never ended',
      ),
    ))
      frames.push(f);
    expect(frames).toEqual([
      { event: 'retry', data: '', retry: 3000 },
      { event: 'session', data: '{"a":1}' },
      { event: 'tool_call', id: '7', data: '{"b":\n2}' },
      { event: 'message', data: 'x' },
    ]);
  });
});
