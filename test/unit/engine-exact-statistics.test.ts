// The CPU backend's per-cluster statistics are exact (native/src/cpu/exact_statistics.h): a pass's sums are the fp64
// nearest to the exact sum of its rows' values on the 2^-96 grid, its inertia the fp64 nearest to the exact
// Σ‖x̃ − c̃‖², whatever the order, the threads or the residency — checked against BigInt references on values where
// fp64 additions lose bits in any order. The statistics persist across passes, moved by the rows whose label changed,
// resident or streamed; after a pass that fails half-way, or one that sees only some rows, the next passes move the
// rows from wherever they were left.
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, type EngineOptions, type PassResult } from '../../native/index.js';
import { bytesOf, Rng, runPass } from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

async function open(n: number, d: number, k: number, o: Partial<EngineOptions> = {}): Promise<Engine> {
  const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', ...o });
  engines.push(e);
  return e;
}

/** x on the 2^-96 grid, truncated toward zero: the integer M with x̃ = M·2^-96 */
function onGrid(x: number): bigint {
  const bits = new Uint32Array(new Float32Array([x]).buffer)[0]!;
  const ex = (bits >>> 23) & 0xff;
  const mant = BigInt(ex ? (bits & 0x7fffff) | 0x800000 : 0);
  const sh = ex - 54;
  const m = sh >= 0 ? mant << BigInt(sh) : mant >> BigInt(-sh);
  return bits >>> 31 ? -m : m;
}

/** the fp64 nearest (ties to even) to v·2^-grid */
function toDouble(v: bigint, grid: number): number {
  const neg = v < 0n;
  let a = neg ? -v : v;
  if (a === 0n) return 0;
  const bits = a.toString(2).length;
  let e = -grid;
  if (bits > 53) {
    const sh = BigInt(bits - 53);
    const q = a >> sh, rem = a & ((1n << sh) - 1n), half = 1n << (sh - 1n);
    a = rem > half || (rem === half && (q & 1n) === 1n) ? q + 1n : q;
    e += bits - 53;
  }
  const r = Number(a) * 2 ** e;
  return neg ? -r : r;
}

/** what a fit pass with centroids c that labelled the rows `labels` must give: next centroids and inertia */
function reference(x: Float32Array, d: number, c: Float32Array, k: number, labels: Int32Array) {
  const sums = Array.from({ length: k * d }, () => 0n);
  const counts = new Array<number>(k).fill(0);
  const inertia = Array.from({ length: k }, () => 0n);
  labels.forEach((l, i) => {
    counts[l]!++;
    for (let j = 0; j < d; j++) {
      const m = onGrid(x[i * d + j]!);
      sums[l * d + j]! += m;
      const diff = m - onGrid(c[l * d + j]!);
      inertia[l]! += diff * diff;
    }
  });
  const next = new Float32Array(k * d);
  for (let l = 0; l < k; l++)
    for (let j = 0; j < d; j++) {
      expect(counts[l], `cluster ${l} has rows`).toBeGreaterThan(0);
      next[l * d + j] = Math.fround(toDouble(sums[l * d + j]!, 96) * (1 / counts[l]!));
    }
  let total = 0;
  for (const v of inertia) total += toDouble(v, 192);
  return { next, inertia: total };
}

/** rows whose values span 2^-100 … 2^60 with both signs: fp64 running sums of them lose bits */
function awkward(n: number, d: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  const scales = [1e-30, 1e-6, 1, 3e4, 1e9, 1e17];
  const x = new Float32Array(n * d);
  for (let i = 0; i < x.length; i++) x[i] = rng.normal() * scales[Math.floor(rng.uniform() * scales.length)]!;
  return x;
}

const same = (a: Float32Array, b: Float32Array) => Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;

describe('exact statistics (CPU backend)', () => {
  it("a cluster's mean is the exact one where fp64 running sums cancel to nothing", async () => {
    // 1e17 + 1 − 1e17 in any fp64 order loses the 1; the exact sum keeps it
    const n = 3, d = 2;
    const x = new Float32Array([1e17, -3, 1, 5, -1e17, 1]);
    const e = await open(n, d, 1, { threads: 2 });
    e.setCentroids(new Float32Array([0, 0]));
    const r = await runPass<PassResult>(e, bytesOf(x), n, 'fit');
    const ref = reference(x, d, new Float32Array([0, 0]), 1, e.labels());
    expect(Array.from(e.centroids())).toEqual(Array.from(ref.next));
    expect(e.centroids()[0]).toBe(Math.fround(1 / 3));
    expect(r.inertia).toBe(ref.inertia);
  });

  it('every pass gives the correctly rounded exact sums and inertia, resident, streamed or both', async () => {
    const n = 2111, d = 7, k = 5;
    const x = awkward(n, d, 11);
    for (const o of [{ threads: 2, chunkRows: 256 }, { threads: 1, memoryBudget: 0, chunkRows: 300 }, { threads: 2, chunkRows: 128, memoryBudget: 900 * (d * 4 + 8) }]) {
      const e = await open(n, d, k, o);
      let c = x.slice(0, k * d);
      e.setCentroids(c);
      for (let pass = 0; pass < 4; pass++) {
        const r = await runPass<PassResult>(e, bytesOf(x), n, 'fit', { skipBelow: pass > 0 ? e.plan.residentRows : 0 });
        const ref = reference(x, d, c, k, e.labels());
        expect(same(e.centroids(), ref.next), `${JSON.stringify(o)}: centroids after pass ${pass + 1}`).toBe(true);
        expect(r.inertia, `${JSON.stringify(o)}: inertia of pass ${pass + 1}`).toBe(ref.inertia);
        c = e.centroids();
      }
    }
  });

  it('a pass that fails after the resident rows moved leaves the next passes the bits of a run without it', async () => {
    const n = 3000, d = 6, k = 8;
    const rng = new Rng(5);
    const x = new Float32Array(n * d).map(() => rng.normal() * 10);
    const bad = x.slice();
    bad[2500 * d + 3] = Number.NaN;  // in the streamed rows: the resident ones have moved by then
    const o = { threads: 2, chunkRows: 250, memoryBudget: 1500 * (d * 4 + 8) };
    const init = x.slice(0, k * d);

    const ref = await open(n, d, k, o);
    ref.setCentroids(init);
    const want: PassResult[] = [];
    for (let pass = 0; pass < 4; pass++) want.push(await runPass<PassResult>(ref, bytesOf(x), n, 'fit', { skipBelow: pass > 0 ? 1500 : 0 }));

    const e = await open(n, d, k, o);
    e.setCentroids(init);
    const got: PassResult[] = [await runPass<PassResult>(e, bytesOf(x), n, 'fit')];
    // the pass runner's way out (core/kmeans/pass-runner.ts): the feed rejects, then finishPass closes the pass
    e.beginPass('fit', { distances: false, dataVariance: true });
    let error: unknown;
    for (let first = 1500; first < n && !error; first += 250) {
      e.buffer(0).set(bytesOf(bad).subarray(first * d * 4, (first + 250) * d * 4));
      await e.feed(0, first, 250).catch((err) => (error = err));
    }
    expect(String(error)).toMatch(/row 2500/);
    await e.finishPass().catch(() => undefined);
    for (let pass = 1; pass < 4; pass++) got.push(await runPass<PassResult>(e, bytesOf(x), n, 'fit', { skipBelow: 1500 }));
    expect(same(e.centroids(), ref.centroids())).toBe(true);
    expect(Array.from(e.labels())).toEqual(Array.from(ref.labels()));
    got.forEach((r, i) => {
      expect(r.inertia, `inertia of pass ${i + 1}`).toBe(want[i]!.inertia);
      expect(r.reassigned, `reassigned in pass ${i + 1}`).toBe(want[i]!.reassigned);
    });
  });

  it('a pass that sees some of the rows counts the others under the label they kept', async () => {
    // the engine keeps the unseen rows' labels (finishPass); the statistics keep them where the last pass put them
    const n = 1200, d = 4, k = 6;
    const x = awkward(n, d, 9);
    const e = await open(n, d, k, { threads: 2, chunkRows: 100, memoryBudget: 0 });
    e.setCentroids(x.slice(0, k * d));
    await runPass<PassResult>(e, bytesOf(x), n, 'fit');
    const c = e.centroids();
    e.beginPass('fit', { distances: false, dataVariance: false });
    for (let first = 0; first < 700; first += 100) {
      e.buffer(0).set(bytesOf(x).subarray(first * d * 4, (first + 100) * d * 4));
      await e.feed(0, first, 100);
    }
    const r = await e.finishPass();
    expect(r.counts.reduce((a, b) => a + b, 0)).toBe(n);
    const ref = reference(x, d, c, k, e.labels());
    expect(same(e.centroids(), ref.next)).toBe(true);
    expect(r.inertia).toBe(ref.inertia);
  });

  it('keeps a row of 2^19 values whose squares all sit at the top of one 64-bit window', async () => {
    // (2^24 − 1)·2^-33: m²·2^62 (of the 2^-192 grid) for every value, ~2^129 for the row's Σ‖x̃‖²
    const n = 1, d = 1 << 19;
    const x = new Float32Array(n * d).fill(Math.fround((2 ** 24 - 1) * 2 ** -33));
    const e = await open(n, d, 1, { threads: 2 });
    e.setCentroids(new Float32Array(d));
    const r = await runPass<PassResult>(e, bytesOf(x), n, 'fit');
    expect(r.inertia).toBe(reference(x, d, new Float32Array(d), 1, e.labels()).inertia);
  });

  it('is exactly 0 where every row sits on its centroid', async () => {
    const n = 40, d = 3;
    const x = awkward(n, d, 3);
    const e = await open(n, d, n, { threads: 2 });
    e.setCentroids(x);
    const r = await runPass<PassResult>(e, bytesOf(x), n, 'assign');
    expect(r.inertia).toBe(0);
  });
});
