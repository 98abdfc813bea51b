#!/usr/bin/env node
/**
 * One Lloyd iteration through the real Engine (the addon, as `kmfleet fit` and the worker drive it): the CUDA
 * Backend's pass plus the Engine's own update (centroid division, shift, data variance, label bookkeeping).
 * kmbench measures the kernels and the Backend; this is the number a user's job sees per iteration.
 *
 *   npm run build:ts && node bench/gpu/engine_pass.mjs [N D K dtype precision ...]   (on the GPU machine)
 *
 * Data: random half/float values (seeded xorshift), all rows resident on the GPU after the first pass (the default
 * planner); iterations 5-14 are timed, the median (as kmbench bench: the first uploads the rows, and exact fp32's first
 * passes cost more while its screen policy settles, so they are left out). After each iteration the centroids
 * are read, as the job's driver does for its checkpoint, timed apart (centroids_read_ms: the device update's centroids
 * come to the host only when read). Prints RESULT_ENGINE lines.
 */
import { Engine } from '../../dist/native/index.js';

const args = process.argv.slice(2);
const shapes = [];
for (let i = 0; i + 5 <= args.length; i += 5) shapes.push(args.slice(i, i + 5));
if (shapes.length === 0) {
  shapes.push(['10000000', '128', '1024', 'f16', 'fp16'], ['1000000', '256', '4096', 'f16', 'fp16'],
    ['1000000', '256', '4096', 'f32', 'fp32'], ['2000000', '128', '1024', 'f32', 'fp32']);
}

function fillRandom(bytes, dtype, seed) {
  // xorshift32 words: f16 → two halves in [-2, 2) per word; f32 → N(0,1)-ish sums of uniforms
  let x = seed >>> 0 || 1;
  const next = () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x; };
  if (dtype === 'f16') {
    const w = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
    // sign | exponent 13..15 (0.125 … 2) | random mantissa, for each half
    for (let i = 0; i < w.length; i++) {
      const r = next();
      const h0 = (r & 0x8000) | (((r >>> 10) % 3 + 12) << 10) | (r & 0x3ff);
      const h1 = ((r >>> 16) & 0x8000) | ((((r >>> 26) % 3) + 12) << 10) | ((r >>> 16) & 0x3ff);
      w[i] = (h1 << 16 | h0) >>> 0;
    }
  } else {
    const f = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
    for (let i = 0; i < f.length; i++) f[i] = ((next() / 4294967296) + (next() / 4294967296) + (next() / 4294967296) - 1.5) * 2;
  }
}

async function feedAll(engine, data, rows, skipBelow) {
  const { chunkRows, buffers, rowBytes } = engine.plan;
  const inFlight = new Array(buffers);
  let b = 0;
  for (let first = skipBelow; first < rows; first += chunkRows) {
    const count = Math.min(chunkRows, rows - first);
    if (inFlight[b]) await inFlight[b];
    engine.buffer(b).set(data.subarray(first * rowBytes, (first + count) * rowBytes));
    inFlight[b] = engine.feed(b, first, count);
    b = (b + 1) % buffers;
  }
  await Promise.all(inFlight.filter(Boolean));
}

for (const [ns, ds, ks, dtype, precision] of shapes) {
  const n = Number(ns), d = Number(ds), k = Number(ks);
  const data = new Uint8Array(n * d * (dtype === 'f16' ? 2 : 4));
  fillRandom(data, dtype, 12345);
  const engine = await Engine.open({ rows: n, dims: d, k, dtype, precision, backend: 'cuda', metric: 'l2' });
  try {
    // centroids: the first k rows as fp32
    const init = new Float32Array(k * d);
    if (dtype === 'f16') {
      const h = new Uint16Array(data.buffer, 0, k * d);
      for (let i = 0; i < k * d; i++) {
        const v = h[i], e = (v >> 10) & 31, m = v & 1023, s = v & 0x8000 ? -1 : 1;
        init[i] = s * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
      }
    } else init.set(new Float32Array(data.buffer, 0, k * d));
    engine.setCentroids(init);
    const times = [], finishes = [], engineMs = [], reads = [];
    const warmUps = 4;
    for (let it = 0; it < warmUps + 10; it++) {
      const t0 = process.hrtime.bigint();
      // as the job's driver: the data variance asked until it has it (ENGINE_PASS_VARIANCE=every: on every pass, A/B)
      engine.beginPass('fit', { dataVariance: it === 0 || process.env.ENGINE_PASS_VARIANCE === 'every' });
      await feedAll(engine, data, n, it === 0 ? 0 : engine.plan.residentRows);
      const t1 = process.hrtime.bigint();
      const r = await engine.finishPass();
      const t2 = process.hrtime.bigint();
      // the job's driver reads the centroids after every iteration (its checkpoint): timed on its own
      if (engine.centroids().length !== k * d) throw new Error('centroids: wrong length');
      const t3 = process.hrtime.bigint();
      if (it >= warmUps) {
        times.push(Number(t2 - t0) / 1e6);
        finishes.push(Number(t2 - t1) / 1e6);
        engineMs.push(r.ms);
        reads.push(Number(t3 - t2) / 1e6);
      }
    }
    const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
    times.sort((a, b) => a - b);
    const med = times[times.length >> 1];
    console.log(`RESULT_ENGINE n=${n} d=${d} k=${k} in=${dtype} precision=${engine.plan.precision} ` +
      `resident=${engine.plan.residentRows} ms_per_iter=${med.toFixed(3)} min_ms=${times[0].toFixed(3)} ` +
      `finish_ms=${median(finishes).toFixed(3)} engine_pass_ms=${median(engineMs).toFixed(3)} ` +
      `centroids_read_ms=${median(reads).toFixed(3)} ` +
      `device="${engine.plan.device}"`);
  } finally {
    engine.close();
  }
}
