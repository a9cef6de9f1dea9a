#!/usr/bin/env node
// Runs the built CLI: the bundle `npm run build` writes (npm start builds it first when sources changed).
import('../dist/agentd.js');
