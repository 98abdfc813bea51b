#!/usr/bin/env node
// The kmfleet command: the compiled CLI lives in dist/ (`npm run build:ts`, done by scripts/setup).
import { existsSync } from 'node:fs';

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('kmfleet: not built yet: run scripts/setup (or npm run build:ts)\n');
  process.exit(1);
}
const { main } = await import(entry.href);
process.exitCode = await main(process.argv);
