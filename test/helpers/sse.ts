// A small SSE client over fetch: parses `event:`/`id:`/`data:` frames and comment lines.
export interface Frame {
  event: string;
  id?: string;
  data: any;
}

export async function* readSse(res: Response): AsyncGenerator<Frame> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let idx: number;
    while ((idx = buf.indexOf('\n\n')) >= 0) {
      const raw = buf.slice(0, idx);
      buf = buf.slice(idx + 2);
      let event = 'message';
      let id: string | undefined;
      const data: string[] = [];
      for (const line of raw.split('\n')) {
        if (line.startsWith(':')) continue;
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('id:')) id = line.slice(3).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length === 0 && event === 'message') continue;
      const text = data.join('\n');
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // keep text
      }
      yield { event, id, data: parsed };
    }
  }
}

/** POST /run and collect every frame until the stream ends. */
export async function streamRun(baseUrl: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; frames: Frame[] }> {
  return streamPost(`${baseUrl}/run`, body, headers);
}

/** POST to a route that may answer with a stream (POST /run, a fork or replay with `stream: true`); a JSON answer is one `json` frame. */
export async function streamPost(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; frames: Frame[] }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  if (!res.headers.get('content-type')?.includes('text/event-stream')) return { status: res.status, frames: [{ event: 'json', data: await res.json() }] };
  const frames: Frame[] = [];
  for await (const f of readSse(res)) frames.push(f);
  return { status: res.status, frames };
}
