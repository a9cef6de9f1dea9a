// What a model provider's or an MCP server's error text may become in a run's error, its events
// and logs: a short, single-line, markup-free, redacted summary. The other side of the wire is
// not trusted to write into what readers see: a base_url pointed at an internal page would
// otherwise have that page quoted back in the run's error message.
import { defaultRedactor } from '../telemetry/redact.js';

/** Characters of foreign error text kept (the status and our own wording come on top). */
export const ERROR_SUMMARY_CHARS = 200;

const HTML_TAG = /<\s*[!/]?[A-Za-z][^>]*>/;

/** One line of at most ERROR_SUMMARY_CHARS, no HTML (a page is named, not quoted), credential shapes redacted. */
export function errorSummary(text: string): string {
  if (HTML_TAG.test(text)) return '(an HTML page, not shown)';
  // eslint-disable-next-line no-control-regex -- control characters are what is removed
  const line = text
    .replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  const clean = defaultRedactor.text(line);
  return clean.length > ERROR_SUMMARY_CHARS ? `${clean.slice(0, ERROR_SUMMARY_CHARS)}…` : clean;
}
