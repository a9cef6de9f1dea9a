import { describe, it, expect } from 'vitest';
import { candidateNames, decide, matchGlob, type GovernanceConfig } from '../../machines/policies/governance.js';

describe('matchGlob', () => {
  it('matches the whole name with * and ?', () => {
    expect(matchGlob('shell.*', 'shell.rm')).toBe(true);
    expect(matchGlob('shell.*', 'myshell.rm')).toBe(false);
    expect(matchGlob('*', '')).toBe(true);
    expect(matchGlob('*_file', 'write_file')).toBe(true);
    expect(matchGlob('*_file', 'write_file_now')).toBe(false);
    expect(matchGlob('tool?', 'tool1')).toBe(true);
    expect(matchGlob('tool?', 'tool')).toBe(false);
    expect(matchGlob('tool?', 'tool12')).toBe(false);
    expect(matchGlob('search', 'search')).toBe(true);
    expect(matchGlob('search', 'Search')).toBe(false);
  });

  it('treats regex characters literally', () => {
    expect(matchGlob('a.b', 'axb')).toBe(false);
    expect(matchGlob('a.b', 'a.b')).toBe(true);
    expect(matchGlob('x+(y)|[z]-{1}$^\\/', 'x+(y)|[z]-{1}$^\\/')).toBe(true);
    expect(matchGlob('x+', 'xx')).toBe(false);
  });
});

describe('decide', () => {
  const gov: GovernanceConfig = {
    rules: [
      { tools: ['shell.rm'], effect: 'deny', reason: 'never delete' },
      { tools: ['shell.*', 'exec_?'], effect: 'ask' },
      { tools: ['create_*'], mcp_server: 'github', effect: 'ask', reason: 'writes to GitHub' },
      { mcp_server: 'github', effect: 'allow' },
      { tools: ['*'], effect: 'deny', reason: 'unlisted' },
    ],
  };

  it('first matching rule wins', () => {
    expect(decide({ tool_name: 'shell.rm' }, gov)).toEqual({ effect: 'deny', rule_index: 0, rule_id: 'rules[0]', reason: 'never delete', approvers: null });
    expect(decide({ tool_name: 'shell.ls' }, gov)).toEqual({ effect: 'ask', rule_index: 1, rule_id: 'rules[1]', reason: 'rule 1: ask', approvers: null });
    expect(decide({ tool_name: 'exec_1' }, gov).rule_index).toBe(1);
    expect(decide({ tool_name: 'other' }, gov)).toMatchObject({ effect: 'deny', rule_index: 4 });
  });

  it('a rule with mcp_server matches only that server, by qualified or bare name', () => {
    expect(decide({ tool_name: 'github.create_issue', mcp_server: 'github' }, gov)).toMatchObject({ effect: 'ask', rule_index: 2 });
    expect(decide({ tool_name: 'github__create_issue', mcp_server: 'github' }, gov)).toMatchObject({ rule_index: 2 });
    expect(decide({ tool_name: 'create_issue', mcp_server: 'github' }, gov)).toMatchObject({ rule_index: 2 });
    expect(decide({ tool_name: 'github.list_issues', mcp_server: 'github' }, gov)).toMatchObject({ effect: 'allow', rule_index: 3 });
    // same tool name, other server or a local tool: the github rules do not apply
    expect(decide({ tool_name: 'create_issue', mcp_server: 'gitlab' }, gov)).toMatchObject({ effect: 'deny', rule_index: 4 });
    expect(decide({ tool_name: 'create_issue' }, gov)).toMatchObject({ effect: 'deny', rule_index: 4 });
  });

  it('a rule without mcp_server sees qualified MCP names too', () => {
    const g: GovernanceConfig = { rules: [{ tools: ['read_*'], effect: 'deny' }], default_effect: 'ask' };
    expect(decide({ tool_name: 'fs.read_file', mcp_server: 'fs' }, g)).toMatchObject({ effect: 'deny', rule_index: 0 });
    expect(candidateNames({ tool_name: 'fs.read_file', mcp_server: 'fs' })).toEqual(['fs.read_file', 'read_file']);
    expect(candidateNames({ tool_name: 'fsx.read_file', mcp_server: 'fs' })).toEqual(['fsx.read_file']);
  });

  it('falls back to default_effect (allow unless set) and allows everything when disabled', () => {
    expect(decide({ tool_name: 'x' }, undefined)).toEqual({
      effect: 'allow',
      rule_index: null,
      rule_id: null,
      reason: 'default effect: allow',
      approvers: null,
    });
    expect(decide({ tool_name: 'x' }, { rules: [] })).toMatchObject({ effect: 'allow', rule_index: null });
    expect(decide({ tool_name: 'x' }, { default_effect: 'ask' })).toMatchObject({ effect: 'ask', rule_index: null });
    expect(decide({ tool_name: 'shell.rm' }, { ...gov, enabled: false })).toEqual({
      effect: 'allow',
      rule_index: null,
      rule_id: null,
      reason: 'governance disabled',
      approvers: null,
    });
  });

  it('an empty tools list matches nothing', () => {
    expect(decide({ tool_name: 'x' }, { rules: [{ tools: [], effect: 'deny' }] })).toMatchObject({ effect: 'allow', rule_index: null });
  });
});
