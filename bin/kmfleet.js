#!/usr/bin/env node
// The kmfleet command: the compiled CLI lives in dist/ (`npm run build:ts`, done by scripts/setup).
// CommonJS (bin/package.json): it runs before Node's ES module loader first uses libuv's thread pool, whose size is
// fixed by then. The first pass reads the rows the engine will hold from a local file with several positional reads at
// once (core/dataset/parallel-read.ts), and four threads (Node's default) cap them at about half of what the page
// cache serves: kmfleet asks for 16 unless UV_THREADPOOL_SIZE says otherwise (docs/operations.md).
'use strict';
process.env.UV_THREADPOOL_SIZE ??= '16';

const { existsSync } = require('node:fs');
const { join } = require('node:path');
const { pathToFileURL } = require('node:url');

const dist = (file) => pathToFileURL(join(__dirname, '..', 'dist', 'cli', file)).href;
if (!existsSync(join(__dirname, '..', 'dist', 'cli', 'main.js'))) {
  process.stderr.write('kmfleet: not built yet: run scripts/setup (or npm run build:ts)\n');
  process.exit(1);
}

(async () => {
  // Tracing, when the OTEL_* environment asks for it, starts before the CLI is loaded: its instrumentations patch
  // ioredis and the AWS SDK as they are first imported. Without it, nothing of the OpenTelemetry SDK is loaded.
  const { startTracing, stopTracing } = await import(dist('tracing.js'));
  try {
    await startTracing();
  } catch (err) {
    process.stderr.write(`kmfleet: error: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const { main } = await import(dist('main.js'));
  process.exitCode = await main(process.argv);
  await stopTracing();
})().catch((err) => {
  process.stderr.write(`kmfleet: error: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
