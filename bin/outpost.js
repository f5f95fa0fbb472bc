#!/usr/bin/env node
// Runs the TypeScript entry point through tsx's loader (no build step).
import { register } from 'tsx/esm/api';

register();
await import('../src/main.ts');
