// Deterministic jitter (docs/contract.md §7): every instance must compute the same offset for the same
// occurrence without coordinating, so it is a pure hash of the occurrence id. No node:crypto and no
// TextEncoder, so it runs anywhere a machine runs.

const FNV_OFFSET_BASIS = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** UTF-8 bytes of a string, encoded by hand (lone surrogates become U+FFFD, as TextEncoder does). */
export function utf8Bytes(text: string): number[] {
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    let cp = text.charCodeAt(i);
    if (cp >= 0xd800 && cp <= 0xdbff) {
      const next = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
      if (next >= 0xdc00 && next <= 0xdfff) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + (next - 0xdc00);
        i++;
      } else {
        cp = 0xfffd;
      }
    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
      cp = 0xfffd;
    }
    if (cp < 0x80) bytes.push(cp);
    else if (cp < 0x800) bytes.push(0xc0 | (cp >> 6), 0x80 | (cp & 0x3f));
    else if (cp < 0x10000) bytes.push(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
    else bytes.push(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
  }
  return bytes;
}

/** FNV-1a, 32-bit, over the UTF-8 bytes of text; an unsigned integer. */
export function fnv1a32(text: string): number {
  let hash = FNV_OFFSET_BASIS;
  for (const byte of utf8Bytes(text)) {
    hash ^= byte;
    hash = Math.imul(hash, FNV_PRIME) >>> 0;
  }
  return hash >>> 0;
}

/** Seconds to add to an occurrence's due time: fnv1a32(occurrenceId) mod (jitter_seconds + 1). */
export function jitterSeconds(occurrenceId: string, jitter_seconds: number | null | undefined): number {
  const max = Math.floor(jitter_seconds ?? 0);
  if (!Number.isFinite(max) || max <= 0) return 0;
  return fnv1a32(occurrenceId) % (max + 1);
}
