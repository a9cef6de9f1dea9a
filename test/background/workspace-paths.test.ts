// absoluteWorkspace keeps what it resolved (a run asks for its folder at every mirror step): the
// answers are the same as resolving each time, per root, and a path outside its root is refused
// every time it is asked, never kept.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { absoluteWorkspace } from '../../src/background/workspace.js';

describe('absoluteWorkspace', () => {
  it('resolves stored paths under their root, the same on every call', () => {
    const root = path.resolve('/srv/ws');
    for (let i = 0; i < 3; i++) {
      expect(absoluteWorkspace('/srv/ws', 'background/a/t/bgrun_1')).toBe(path.join(root, 'background/a/t/bgrun_1'));
      expect(absoluteWorkspace('/srv/ws', 'background/a/t/./x/../bgrun_2')).toBe(path.join(root, 'background/a/t/bgrun_2'));
      // A row written before paths were stored relative holds an absolute one inside the root.
      expect(absoluteWorkspace('/srv/ws', path.join(root, 'background/a/t/bgrun_3'))).toBe(path.join(root, 'background/a/t/bgrun_3'));
    }
    // The same stored path under another root is that root's folder.
    expect(absoluteWorkspace('/srv/other', 'background/a/t/bgrun_1')).toBe(path.join(path.resolve('/srv/other'), 'background/a/t/bgrun_1'));
  });

  it('refuses a path outside its root on every call', () => {
    for (let i = 0; i < 3; i++) {
      expect(() => absoluteWorkspace('/srv/ws', '../escape')).toThrow(/outside the workspace root/);
      expect(() => absoluteWorkspace('/srv/ws', '/etc')).toThrow(/outside the workspace root/);
      expect(() => absoluteWorkspace('/srv/ws', '.')).toThrow(/outside the workspace root/);
    }
  });
});
