// What a provider's or MCP server's error text becomes in runs and events (src/agent/error-summary.ts).
import { describe, expect, it } from 'vitest';
import { ERROR_SUMMARY_CHARS, errorSummary } from '../../src/agent/error-summary.js';

describe('errorSummary', () => {
  it('keeps a short message as it is', () => {
    expect(errorSummary('Incorrect model name')).toBe('Incorrect model name');
  });

  it('names an HTML page instead of quoting it', () => {
    expect(errorSummary('Error POSTing to endpoint (HTTP 401): <!doctype html><title>Admin</title>secret rows')).toBe('(an HTML page, not shown)');
    expect(errorSummary('<pre>internal</pre>')).toBe('(an HTML page, not shown)');
  });

  it('makes one line, cut at ERROR_SUMMARY_CHARS', () => {
    const out = errorSummary(`line one\nline two\r\n\u2028${'z'.repeat(500)}`);
    expect(out.startsWith('line one line two z')).toBe(true);
    expect(out.length).toBe(ERROR_SUMMARY_CHARS + 1);
    expect(out.endsWith('…')).toBe(true);
  });

  it('redacts credential shapes before cutting', () => {
    const out = errorSummary('invalid key: Bearer sk-proj-abcdefghijklmnopqrstuvwxyz0123456789 (check your settings)');
    expect(out).not.toContain('abcdefghijklmnop');
    expect(out).toContain('[REDACTED]');
  });
});
