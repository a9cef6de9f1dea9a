// The JSON body parser: Fastify's own (prototype-poisoning checks included) behind a nesting-depth
// check. Why a check before parsing: a body of 10,000 nested arrays parses fine, but every later
// walk of it (zod, redaction, JSON.stringify in the store) is recursive, and one of them threw a
// RangeError that reached the client as a 500. Refusing it here, with a `loc`, keeps the
// rest of the service free of depth concerns. The scan is one pass over the text, no allocation.
import type { FastifyInstance } from 'fastify';
import { HttpValidationFailure } from './validation.js';

export interface DepthViolation {
  /** Path from the body's root to the first container nested deeper than allowed. */
  path: Array<string | number>;
}

interface Frame {
  array: boolean;
  /** Array: index of the current item. Object: the last key read. */
  key: string | number;
  expectKey: boolean;
}

/**
 * Returns where `text` (JSON) first nests deeper than `maxDepth` containers, or null.
 * Tolerates invalid JSON (the real parser reports that); strings are skipped, escapes included.
 */
export function findTooDeep(text: string, maxDepth: number): DepthViolation | null {
  let depth = 0;
  // One frame per open container; the scan stops at the first one past the limit.
  const frames: Frame[] = [];
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      const start = i;
      for (i++; i < n; i++) {
        const d = text.charCodeAt(i);
        if (d === 92 /* \ */) i++;
        else if (d === 34) break;
      }
      const top = frames[frames.length - 1];
      if (top && !top.array && top.expectKey) {
        try {
          top.key = JSON.parse(text.slice(start, i + 1)) as string;
        } catch {
          top.key = text.slice(start + 1, i);
        }
        top.expectKey = false;
      }
    } else if (c === 123 /* { */ || c === 91 /* [ */) {
      depth++;
      if (depth > maxDepth) return { path: frames.map((f) => f.key) };
      frames.push({ array: c === 91, key: c === 91 ? 0 : '', expectKey: c === 123 });
    } else if (c === 125 /* } */ || c === 93 /* ] */) {
      if (depth > 0) {
        depth--;
        frames.pop();
      }
    } else if (c === 44 /* , */) {
      const top = frames[frames.length - 1];
      if (top) {
        if (top.array) top.key = (top.key as number) + 1;
        else top.expectKey = true;
      }
    }
  }
  return null;
}

/** Replaces the application/json parser with Fastify's default behind the depth check. */
export function installJsonBodyParser(app: FastifyInstance, maxDepth: number): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string;
    const deep = findTooDeep(text, maxDepth);
    if (deep) {
      done(
        new HttpValidationFailure([
          { loc: ['body', ...deep.path], msg: `JSON nesting deeper than ${maxDepth} levels`, type: 'json_too_deep', ctx: { max_depth: maxDepth } },
        ]),
        undefined,
      );
      return;
    }
    parse(request, text, done);
  });
}
