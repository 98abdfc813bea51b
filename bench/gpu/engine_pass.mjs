#!/usr/bin/env node
/**
 * One Lloyd iteration through the real Engine (the addon, as `kmfleet fit` and the worker drive it): the CUDA
 * Backend's pass plus the Engine's own update (centroid division, shift, data variance, label bookkeeping).
 * kmbench measures the kernels and the Backend; this is the number a user's job sees per iteration.
 *
 *   npm run build:ts && node bench/gpu/engine_pass.mjs [N D K dtype precision ...]   (on the GPU machine)
 *
 * Data: random half/float values (seeded xorshift, made chunk by chunk in the engine's buffers during the first pass),
 * all rows resident on the GPU after it (the default planner). Iterations 5-14 are timed, the median (as kmbench
 * bench: the first uploads the rows, and exact fp32's first passes cost more while its screen policy settles).
 * Each iteration is the job driver's: beginPass told where the feeds start, the previous iteration's centroids (its
 * checkpoint) read by the engine behind the begin while the pass computes, then finishPass. ms_per_iter is that whole
 * iteration, the read included; pass_ms ends at finishPass; centroids_read_ms is what the read added after it (~0
 * beside the pass; ENGINE_PASS_READ=after: the read after the pass, timed apart, for A/B); reassigned is the
 * share of rows whose label changed at the first and the last timed iteration; early_ms and early_reassigned are the
 * same for iterations 2–4 (rows resident, many labels still changing); timed_ms lists the timed iterations one by one.
 * Prints RESULT_ENGINE lines.
 */
import { Engine } from '../../dist/native/index.js';

const args = process.argv.slice(2);
const shapes = [];
for (let i = 0; i + 5 <= args.length; i += 5) shapes.push(args.slice(i, i + 5));
if (shapes.length === 0) {
  shapes.push(['10000000', '128', '1024', 'f16', 'fp16'], ['10000000', '128', '1024', 'f32', 'fp32'],
    ['1000000', '256', '4096', 'f16', 'fp16'], ['1000000', '256', '4096', 'f32', 'fp32']);
}

// The rows as one seeded stream (xorshift32 words): f16 → two halves in [-2, 2) a word, f32 → standard normal
// values. The same values whether made in one piece or chunk by chunk, so the first pass makes each chunk
// straight into the engine's buffer: 10M×128 f32 (5.1 GB) is more than one JS typed array holds.
class RowStream {
  constructor(dtype, seed) {
    this.dtype = dtype;
    this.x = seed >>> 0 || 1;
    this.high = -1;          // f16: the word's second half, not yet handed out
    this.spare = undefined;  // f32: Box–Muller's second value
  }
  next() {
    let x = this.x;
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    this.x = x;
    return x;
  }
  fill(bytes) {
    if (this.dtype === 'f16') {
      // sign | exponent 12..14 (0.125 … 2) | random mantissa, for each half of a word
      const h = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 1);
      for (let i = 0; i < h.length; i++) {
        if (this.high < 0) {
          const r = this.next();
          h[i] = (r & 0x8000) | (((r >>> 10) % 3 + 12) << 10) | (r & 0x3ff);
          this.high = ((r >>> 16) & 0x8000) | ((((r >>> 26) % 3) + 12) << 10) | ((r >>> 16) & 0x3ff);
        } else {
          h[i] = this.high;
          this.high = -1;
        }
      }
    } else {
      // standard normal values (Box–Muller), as kmbench's and the torch baseline's rows (the exact mode's screen
      // passes on more rows of flatter data, e.g. sums of three uniforms)
      const f = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
      for (let i = 0; i < f.length; i++) {
        if (this.spare !== undefined) {
          f[i] = this.spare;
          this.spare = undefined;
          continue;
        }
        const u = (this.next() + 1) / 4294967297, v = this.next() / 4294967296;  // u in (0, 1]
        const r = Math.sqrt(-2 * Math.log(u));
        f[i] = r * Math.cos(2 * Math.PI * v);
        this.spare = r * Math.sin(2 * Math.PI * v);
      }
    }
  }
}

// One pass's feeds; on the first pass (stream given) each chunk is made in its buffer. Later passes feed nothing:
// every row is resident (checked when the engine opens).
async function feedAll(engine, rows, skipBelow, stream) {
  const { chunkRows, buffers, rowBytes } = engine.plan;
  const inFlight = new Array(buffers);
  let b = 0;
  for (let first = skipBelow; first < rows; first += chunkRows) {
    const count = Math.min(chunkRows, rows - first);
    if (inFlight[b]) await inFlight[b];
    stream.fill(engine.buffer(b).subarray(0, count * rowBytes));
    inFlight[b] = engine.feed(b, first, count);
    b = (b + 1) % buffers;
  }
  await Promise.all(inFlight.filter(Boolean));
}

// ENGINE_PASS_SPIN=1 (a diagnosis, not how a job waits): the event loop kept busy (setImmediate) until the promise
// settles, so the JS thread never sleeps during the pass: the hop back from the engine thread without a wake-up.
async function spinning(promise) {
  let settled = false;
  promise.then(() => { settled = true; }, () => { settled = true; });
  while (!settled) await new Promise(setImmediate);
  return promise;
}

for (const [ns, ds, ks, dtype, precision] of shapes) {
  const n = Number(ns), d = Number(ds), k = Number(ks);
  const engine = await Engine.open({ rows: n, dims: d, k, dtype, precision, backend: 'cuda', metric: 'l2' });
  try {
    if (engine.plan.residentRows < n) {
      throw new Error(`${n}×${d}: only ${engine.plan.residentRows} rows resident; this benchmark times resident passes`);
    }
    // centroids: the first k rows (the stream's start) as fp32
    const first = new Uint8Array(k * d * (dtype === 'f16' ? 2 : 4));
    new RowStream(dtype, 12345).fill(first);
    const init = new Float32Array(k * d);
    if (dtype === 'f16') {
      const h = new Uint16Array(first.buffer, 0, k * d);
      for (let i = 0; i < k * d; i++) {
        const v = h[i], e = (v >> 10) & 31, m = v & 1023, s = v & 0x8000 ? -1 : 1;
        init[i] = s * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
      }
    } else init.set(new Float32Array(first.buffer, 0, k * d));
    engine.setCentroids(init);
    // As the job's driver (core/kmeans/driver.ts) on a device engine: beginPass says where the feeds start, and the
    // previous iteration's centroids (its checkpoint) are read by the engine right behind the begin while the pass
    // computes. ENGINE_PASS_READ=after: the read after the pass, timed apart, for A/B.
    const readAfter = process.env.ENGINE_PASS_READ === 'after';
    const times = [], passes = [], finishes = [], engineMs = [], reads = [], reassigned = [];
    const early = [], earlyReassigned = [];  // iterations 2–4: rows resident, but many labels still changing
    let begunByEngine = 0;
    const warmUps = 4;
    for (let it = 0; it < warmUps + 10; it++) {
      const t0 = process.hrtime.bigint();
      // the data variance asked until it has it (ENGINE_PASS_VARIANCE=every: on every pass, A/B)
      const dataVariance = it === 0 || process.env.ENGINE_PASS_VARIANCE === 'every';
      // the driver's stopping rule (tol 0: random rows do not converge in 14 iterations), so that the engine begins
      // each next pass itself; ENGINE_PASS_CHAIN=0: without it (A/B)
      const chain = process.env.ENGINE_PASS_CHAIN === '0' ? undefined : { tol: 0, tolReassign: 0, variance: NaN, passesLeft: 1000 - it };
      engine.beginPass('fit', readAfter ? { dataVariance } : { dataVariance, firstRow: it === 0 ? 0 : n, chain });
      const read = readAfter ? undefined : engine.readCentroids();
      await feedAll(engine, n, it === 0 ? 0 : n, it === 0 ? new RowStream(dtype, 12345) : null);
      const t1 = process.hrtime.bigint();
      const r = process.env.ENGINE_PASS_SPIN ? await spinning(engine.finishPass()) : await engine.finishPass();
      const t2 = process.hrtime.bigint();
      const c = readAfter ? engine.centroids() : await read;
      if (c.length !== k * d) throw new Error('centroids: wrong length');
      const t3 = process.hrtime.bigint();
      // ENGINE_PASS_TRACE=1 (with KMFLEET_ENGINE_STATS=1): this side's times on the engine's monotonic clock, so the
      // engine's "begin" and "end" show the hops to and from the engine thread
      if (process.env.ENGINE_PASS_TRACE) {
        const ms = (t) => (Number(t) / 1e6).toFixed(3);
        console.error(`[engine_pass] iteration ${it} monotonic: beginPass ${ms(t0)}, fed ${ms(t1)}, resolved ${ms(t2)}, read ${ms(t3)}`);
      }
      if (it >= 1 && it < warmUps) {
        early.push(Number(t3 - t0) / 1e6);
        earlyReassigned.push(r.reassigned / n);
      }
      if (it >= warmUps) {
        times.push(Number(t3 - t0) / 1e6);
        passes.push(Number(t2 - t0) / 1e6);
        finishes.push(Number(t2 - t1) / 1e6);
        engineMs.push(r.ms);
        reads.push(Number(t3 - t2) / 1e6);
        if (r.begunByEngine) begunByEngine++;
        reassigned.push(r.reassigned / n);
      }
    }
    const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
    console.log(`RESULT_ENGINE n=${n} d=${d} k=${k} in=${dtype} precision=${engine.plan.precision} ` +
      `resident=${engine.plan.residentRows} ms_per_iter=${median(times).toFixed(3)} min_ms=${Math.min(...times).toFixed(3)} ` +
      `pass_ms=${median(passes).toFixed(3)} finish_ms=${median(finishes).toFixed(3)} engine_pass_ms=${median(engineMs).toFixed(3)} ` +
      `centroids_read=${readAfter ? 'after' : 'beside'} centroids_read_ms=${median(reads).toFixed(3)} ` +
      `begun_by_engine=${begunByEngine}/${times.length} ` +
      // the share of rows whose label changed, at the first and the last timed iteration (what sums kept up to date
      // by the changed rows read: cuda/NOTES.md "Exact statistics")
      `reassigned=${(100 * reassigned[0]).toFixed(2)}%..${(100 * reassigned[reassigned.length - 1]).toFixed(2)}% ` +
      `early_ms=${early.map((v) => v.toFixed(2)).join(',')} timed_ms=${times.map((v) => v.toFixed(2)).join(',')} ` +
      `early_reassigned=${earlyReassigned.map((v) => (100 * v).toFixed(1) + '%').join(',')} ` +
      `device="${engine.plan.device}"`);
  } finally {
    engine.close();
  }
}
