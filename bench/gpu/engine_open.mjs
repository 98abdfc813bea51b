#!/usr/bin/env node
/**
 * How long a CUDA engine takes to open (device arrays, streams, pinned host buffers) at the pipeline bench's shape
 * (1M×32, k=100): the planner's host buffers against three given. Engines are opened one after another, each right
 * after the previous one's close (so its teardown may overlap the next open); the first open (the CUDA context) is
 * not timed.
 *
 *   KMFLEET_ADDON=… node bench/gpu/engine_open.mjs [--runs 3]
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const ROOT = new URL('../..', import.meta.url).pathname;
const { values: a } = parseArgs({ options: { runs: { type: 'string', default: '3' } } });
const { Engine } = await import(join(ROOT, 'dist/native/index.js'));
const shape = { rows: 1_000_000, dims: 32, k: 100, metric: 'l2', dtype: 'f32', backend: 'cuda' };
(await Engine.open(shape)).close();
for (let r = 0; r < Number(a.runs); r++) {
  for (const [name, extra] of [['planner', {}], ['buffers 3', { buffers: 3 }]]) {
    const t0 = performance.now();
    const e = await Engine.open({ ...shape, ...extra });
    const ms = performance.now() - t0;
    console.log(`open ${name}: ${ms.toFixed(1)} ms, buffers ${e.plan.buffers}`);
    e.close();
  }
}
