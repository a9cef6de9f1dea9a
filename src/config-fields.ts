// The field builders of the config file's schema (src/config-schema.ts, src/config-schema-agent.ts):
// one operator-readable message per check.
import { z } from 'zod';

// --- field builders with one operator-readable message each ------------------------------------
// Messages are set per check because a ConfigError prints `<path>: <message>` and zod's defaults
// ("Too small: expected number to be >0") read poorly at start-up.

export const posInt = (what = 'a positive integer') =>
  z
    .number({ error: `expected ${what}` })
    .int({ error: `expected ${what}` })
    .min(1, { error: `expected ${what}` });
export const posNumber = (what = 'a number greater than 0') => z.number({ error: `expected ${what}` }).positive({ error: `expected ${what}` });
export const nonNegNumber = (what = 'a number >= 0') => z.number({ error: `expected ${what}` }).min(0, { error: `expected ${what}` });
export const str = () => z.string({ error: 'expected a string' });
export const nonEmpty = () => z.string({ error: 'expected a non-empty string' }).min(1, { error: 'expected a non-empty string' });
export const bool = () => z.boolean({ error: 'expected true or false' });
export const oneOf = <const T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: `expected one of ${values.map((v) => `"${v}"`).join(', ')}` });
export const url = () => z.url({ error: 'expected an absolute URL such as http://localhost:11434/v1' });
export const obj = <S extends z.core.$ZodLooseShape>(shape: S) => z.strictObject(shape, { error: 'expected an object' });
export const arr = <T extends z.ZodType>(item: T) => z.array(item, { error: 'expected an array' });
export const strMap = () => z.record(z.string(), str(), { error: 'expected an object of strings' });

/** An exact web origin: scheme, host and port only (what a browser sends in `Origin`). */
export const origin = () =>
  z.string({ error: 'expected an origin such as https://app.example.com' }).refine(
    (o) => {
      try {
        const u = new URL(o);
        return (u.protocol === 'http:' || u.protocol === 'https:') && u.origin === o;
      } catch {
        return false;
      }
    },
    { error: 'expected an exact origin such as https://app.example.com (scheme, host and optional port; no path, no trailing slash, no wildcard)' },
  );

export function isValidRegex(s: string): boolean {
  try {
    new RegExp(s);
    return true;
  } catch {
    return false;
  }
}
