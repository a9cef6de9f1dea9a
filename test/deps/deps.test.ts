// Dependencies agree with `engines` (no production package refuses the oldest Node we declare)
// and every listed dependency is used. scripts/check-deps.mjs holds the checks (also a CLI).
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script without type declarations
import { enginesProblems, oldestNode, satisfies, unusedDependencies } from '../../scripts/check-deps.mjs';

describe('dependencies', () => {
  it('reads npm ranges the way engines fields use them', () => {
    expect(satisfies('20.20.2', '>=18')).toBe(true);
    expect(satisfies('20.20.2', '>= 0.6')).toBe(true);
    expect(satisfies('20.20.2', '>=22')).toBe(false);
    expect(satisfies('20.20.2', '^18.17.0 || >=20.5.0')).toBe(true);
    expect(satisfies('20.20.2', '^20.19.0 || ^22.12.0 || >=23')).toBe(true);
    expect(satisfies('20.20.2', '^22.12.0 || >=24')).toBe(false);
    expect(satisfies('20.20.2', '>=20.20.2')).toBe(true);
    expect(satisfies('20.20.0', '>=20.20.2')).toBe(false);
    expect(satisfies('20.20.2', '>=14 <22')).toBe(true);
    expect(satisfies('20.20.2', '>=14 <20')).toBe(false);
    expect(satisfies('20.20.2', '20.x')).toBe(true);
    expect(satisfies('20.20.2', '~20.19')).toBe(false);
    expect(satisfies('20.20.2', '>20')).toBe(false);
    expect(satisfies('20.20.2', '*')).toBe(true);
  });

  it('installs no production package that needs a newer Node than engines.node declares', () => {
    const r = enginesProblems();
    expect(r.node).toBe(oldestNode());
    expect(r.checked).toBeGreaterThan(50);
    expect(r.problems).toEqual([]);
  });

  it('lists no dependency that nothing imports', () => {
    expect(unusedDependencies()).toEqual([]);
  });
});
