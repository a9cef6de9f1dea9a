// The tools layer (decisions §10, §7): local module, built-ins, MCP servers, argument validation
// and the observation pipeline. Everything the runtime and the HTTP layer use comes from here.
export type { ToolContext, McpServerStatus } from './types.js';
export { TOOL_NAME_RE } from './types.js';
export { ToolRegistry } from './registry.js';
export { formatObservation } from './observation.js';
export { McpUnavailableError, McpToolError, exposedToolName } from './mcp.js';
