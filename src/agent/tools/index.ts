// The tools layer (decisions §10, §7): local module, built-ins, MCP servers, argument validation
// and the observation pipeline. Everything the runtime and the HTTP layer use comes from here.
export type { ToolContext, RegisteredTool, McpServerStatus, McpServerConfig, McpStdioServerConfig, McpHttpServerConfig, ToolsConfig, BuiltinToolSet, ToolLogger } from './types.js';
export { TOOL_NAME_RE } from './types.js';
export { ToolRegistry, type ToolRegistryOptions } from './registry.js';
export { formatObservation, cleanText, DEFAULT_OBSERVATION_MAX_CHARS, type Observation } from './observation.js';
export { McpUnavailableError, McpToolError, exposedToolName } from './mcp.js';
