#!/usr/bin/env node
// Runs the built CLI (npm start builds it first when sources changed).
import('../dist/src/cli.js');
