#!/usr/bin/env node
// The kmfleet command: the compiled CLI lives in dist/ (`npm run build:ts`, done by scripts/setup).
import { existsSync } from 'node:fs';

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('kmfleet: not built yet: run scripts/setup (or npm run build:ts)\n');
  process.exit(1);
}
// Tracing, when the OTEL_* environment asks for it, starts before the CLI is loaded: its instrumentations patch ioredis
// and the AWS SDK as they are first imported. Without it, nothing of the OpenTelemetry SDK is loaded.
const { startTracing, stopTracing } = await import(new URL('../dist/cli/tracing.js', import.meta.url).href);
try {
  await startTracing();
} catch (err) {
  process.stderr.write(`kmfleet: error: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(2);
}
const { main } = await import(entry.href);
process.exitCode = await main(process.argv);
await stopTracing();
