// DESIGN.md "Numerics": the same data gives bitwise-identical centroids whether it came as one chunk or a thousand,
// whatever the thread count, the resident/streamed split or the CPU kernel (instruction set).
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, type EngineOptions, type PassResult } from '../../native/index.js';
import { blobData, bytesOf, normalData, pickRows, runPass } from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

interface Run {
  centroids: Float32Array;
  labels: Int32Array;
  results: PassResult[];
}

async function fit(
  x: Float32Array, n: number, d: number, k: number, init: Float32Array, passes: number,
  o: Partial<EngineOptions> & { feedChunk?: number; isa?: string } = {},
): Promise<Run> {
  if (o.isa) process.env.KMFLEET_CPU_ISA = o.isa;
  try {
    const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', ...o });
    engines.push(e);
    e.setCentroids(init);
    const results: PassResult[] = [];
    for (let p = 0; p < passes; p++) {
      results.push(await runPass<PassResult>(e, bytesOf(x), n, 'fit', { chunk: o.feedChunk, skipBelow: p > 0 ? e.plan.residentRows : 0 }));
    }
    return { centroids: e.centroids(), labels: e.labels(), results };
  } finally {
    delete process.env.KMFLEET_CPU_ISA;
  }
}

function expectSame(a: Run, b: Run, what: string): void {
  expect(Buffer.compare(Buffer.from(a.centroids.buffer), Buffer.from(b.centroids.buffer)), `${what}: centroids differ`).toBe(0);
  expect(Buffer.compare(Buffer.from(a.labels.buffer), Buffer.from(b.labels.buffer)), `${what}: labels differ`).toBe(0);
  a.results.forEach((r, i) => {
    expect(r.inertia, `${what}: inertia of pass ${i}`).toBe(b.results[i].inertia);
    expect(r.shift, `${what}: shift of pass ${i}`).toBe(b.results[i].shift);
    expect(r.dataVariance, `${what}: dataVariance of pass ${i}`).toBe(b.results[i].dataVariance);
  });
}

describe('bitwise determinism', () => {
  const n = 6007, d = 13, k = 17;
  const x = blobData(n, d, 12, 77, 3, 1);
  const init = pickRows(x, d, Array.from({ length: k }, (_, i) => i * 301));

  it('1 chunk vs many chunks vs 1 or 2 threads vs resident or streamed', async () => {
    const base = await fit(x, n, d, k, init, 4, { chunkRows: n, threads: 1, memoryBudget: 0 });
    expectSame(base, await fit(x, n, d, k, init, 4, { chunkRows: 97, threads: 2, memoryBudget: 0 }), '97-row chunks, 2 threads');
    expectSame(base, await fit(x, n, d, k, init, 4, { chunkRows: 1000, threads: 2 }), 'all resident, 2 threads');
    expectSame(base, await fit(x, n, d, k, init, 4, { chunkRows: 500, threads: 2, memoryBudget: 2500 * (d * 4 + 8) }), 'partly resident');
    expectSame(base, await fit(x, n, d, k, init, 4, { chunkRows: 1000, feedChunk: 7, threads: 2, memoryBudget: 0 }), '7-row feeds');
  });

  it('a driver that streams every row again on later passes gets the same bits as one that skips resident rows', async () => {
    const skip = await fit(x, n, d, k, init, 3, { chunkRows: 1000, threads: 2 });
    const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 1000, threads: 2 });
    engines.push(e);
    expect(e.plan.residentRows).toBe(n);
    e.setCentroids(init);
    const results: PassResult[] = [];
    for (let p = 0; p < 3; p++) results.push(await runPass<PassResult>(e, bytesOf(x), n, 'fit'));
    expectSame(skip, { centroids: e.centroids(), labels: e.labels(), results }, 'streaming from row 0');
  });

  it('a pass told to skip the data variance reports NaN there and the same bits otherwise', async () => {
    const asked = await fit(x, n, d, k, init, 4, { chunkRows: 1000, threads: 2 });
    const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 1000, threads: 2 });
    engines.push(e);
    e.setCentroids(init);
    const results: PassResult[] = [];
    for (let p = 0; p < 4; p++) {
      results.push(await runPass<PassResult>(e, bytesOf(x), n, 'fit', { skipBelow: p > 0 ? e.plan.residentRows : 0, dataVariance: p === 0 }));
    }
    expect(Number.isFinite(results[0].dataVariance)).toBe(true);
    for (const r of results.slice(1)) expect(r.dataVariance).toBeNaN();
    // the same run but for the variance of passes 1-3
    results.slice(1).forEach((r, i) => { r.dataVariance = asked.results[i + 1].dataVariance; });
    expectSame(asked, { centroids: e.centroids(), labels: e.labels(), results }, 'variance skipped');
  });

  it('beginPass while a pass is open replaces it (its work is discarded)', async () => {
    const a = await fit(x, n, d, k, init, 2, { chunkRows: 1000, threads: 2, memoryBudget: 0 });
    const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 1000, threads: 2, memoryBudget: 0 });
    engines.push(e);
    e.setCentroids(init);
    e.beginPass('fit');
    e.buffer(0).set(bytesOf(x).subarray(0, 1000 * d * 4));
    await e.feed(0, 0, 1000); // abandoned after one chunk
    const results: PassResult[] = [];
    for (let p = 0; p < 2; p++) results.push(await runPass<PassResult>(e, bytesOf(x), n, 'fit'));
    expectSame(a, { centroids: e.centroids(), labels: e.labels(), results }, 'after an abandoned pass');
  });

  it('the same bits from every CPU kernel (generic, AVX2, AVX-512, the AVX-512 BF16 screen)', async () => {
    const y = normalData(3000, 37, 5);
    const c = pickRows(y, 37, Array.from({ length: 50 }, (_, i) => i * 7));
    const runs = [];
    for (const isa of ['generic', 'avx2', 'avx512', 'avx512bf16']) runs.push(await fit(y, 3000, 37, 50, c, 3, { isa, chunkRows: 256, threads: 2 }));
    expectSame(runs[0], runs[1], 'generic vs avx2');
    expectSame(runs[0], runs[2], 'generic vs avx512');
    expectSame(runs[0], runs[3], 'generic vs avx512bf16');
  });

  it('cosine too', async () => {
    const y = normalData(2500, 9, 8);
    const c = pickRows(y, 9, Array.from({ length: 12 }, (_, i) => i * 11));
    const a = await fit(y, 2500, 9, 12, c, 3, { metric: 'cosine', chunkRows: 2500, threads: 1, memoryBudget: 0 });
    const b = await fit(y, 2500, 9, 12, c, 3, { metric: 'cosine', chunkRows: 61, threads: 2 });
    expectSame(a, b, 'cosine');
  });

  it('k-means++: the same seed gives the same centroids (any thread count), rows of the sample', async () => {
    const s = normalData(5000, 6, 9);
    const run = async (threads: number, seed: number) => {
      const e = await Engine.open({ rows: 5000, dims: 6, k: 40, metric: 'l2', dtype: 'f32', backend: 'cpu', threads });
      engines.push(e);
      await e.initKmeansPlusPlus(s, 5000, seed);
      return e.centroids();
    };
    const a = await run(1, 42), b = await run(2, 42), c = await run(2, 43);
    expect(Buffer.compare(Buffer.from(a.buffer), Buffer.from(b.buffer))).toBe(0);
    expect(Buffer.compare(Buffer.from(a.buffer), Buffer.from(c.buffer))).not.toBe(0);
    const rows = new Set<string>();
    for (let i = 0; i < 5000; i++) rows.add(Array.from(s.subarray(i * 6, i * 6 + 6)).join(','));
    const seen = new Set<string>();
    for (let j = 0; j < 40; j++) {
      const key = Array.from(a.subarray(j * 6, j * 6 + 6)).join(',');
      expect(rows.has(key), `centroid ${j} is a sample row`).toBe(true);
      seen.add(key);
    }
    expect(seen.size, 'distinct centers').toBe(40);
  });

  it('k-means++ on values near the fp32 limit (~1e19) still spreads the centers over the clusters', async () => {
    const s = blobData(2000, 3, 4, 21, 100, 1).map((v) => v * 1e17);
    const e = await Engine.open({ rows: 2000, dims: 3, k: 4, metric: 'l2', dtype: 'f32', backend: 'cpu' });
    engines.push(e);
    await e.initKmeansPlusPlus(Float32Array.from(s), 2000, 1);
    const c = e.centroids();
    const keys = new Set<string>();
    for (let j = 0; j < 4; j++) keys.add(Array.from(c.subarray(j * 3, j * 3 + 3)).map((v) => Math.round(v / 1e19)).join(','));
    expect(keys.size, 'the 4 centers lie in 4 different blobs').toBe(4);
  });
});
