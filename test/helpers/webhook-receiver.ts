// A local webhook receiver for tests: records every POST (headers, body) and answers with the
// status its script says (default 200), or never answers (`hang`).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  id: string;
  timestamp: string;
  signature: string;
  body: string;
  json: any;
  path: string;
  answered: number | 'hang';
}

export interface WebhookReceiver {
  readonly url: string;
  readonly port: number;
  readonly received: Received[];
  /** Answers for the next requests, in order (then `fallback`). */
  script(...answers: Array<number | 'hang'>): void;
  fallback: number | 'hang';
  close(): Promise<void>;
}

export async function startWebhookReceiver(port = 0): Promise<WebhookReceiver> {
  const received: Received[] = [];
  const queue: Array<number | 'hang'> = [];
  const hanging = new Set<ServerResponse>();
  const r = {
    url: '',
    port: 0,
    received,
    fallback: 200 as number | 'hang',
    script: (...a: Array<number | 'hang'>) => void queue.push(...a),
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = Buffer.concat(parts).toString('utf8');
      const answer = queue.length > 0 ? queue.shift()! : r.fallback;
      let json: unknown = null;
      try {
        json = JSON.parse(body);
      } catch {
        // kept as text
      }
      received.push({
        id: String(req.headers['webhook-id'] ?? ''),
        timestamp: String(req.headers['webhook-timestamp'] ?? ''),
        signature: String(req.headers['webhook-signature'] ?? ''),
        body,
        json,
        path: req.url ?? '/',
        answered: answer,
      });
      if (answer === 'hang') {
        hanging.add(res);
        return;
      }
      res.writeHead(answer, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', () => resolve()));
  r.port = (server.address() as AddressInfo).port;
  r.url = `http://127.0.0.1:${r.port}/hooks`;
  return r;
}
