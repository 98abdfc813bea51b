// The CUDA backend finds the farthest rows only for a pass that left a cluster empty (backend.h), resident rows
// from the fp64 distances it kept; resident rows are accumulated in one go (accumulateResident). Both must give
// what the per-chunk path gave: the same re-seeded row as the CPU backend, the same bits resident or streamed.
import { describe, expect, it } from 'vitest';

import { type PassResult } from '../../native/index.js';
import { blobData, bytesOf, pickRows, runPass } from '../helpers/reference.js';
import { emptiesMidFit } from '../helpers/reseed-data.js';
import { distinctRows, engineTracker, fit } from './gpu-helpers.js';

const open = engineTracker();

function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

describe('a cluster that empties mid-fit (CUDA)', () => {
  const { x, n, d, k, init } = emptiesMidFit(60000);
  const chunk = 4096;

  async function run(backend: 'cpu' | 'cuda', memoryBudget: number | undefined) {
    const e = await open({ rows: n, dims: d, k, backend, chunkRows: chunk, ...(memoryBudget === undefined ? {} : { memoryBudget }) });
    e.setCentroids(init);
    const centroids: Float32Array[] = [];
    const results: PassResult[] = [];
    for (let p = 0; p < 4; p++) {
      results.push(await runPass<PassResult>(e, bytesOf(x), n, 'fit', { skipBelow: p === 0 ? 0 : e.plan.residentRows }));
      centroids.push(e.centroids());
    }
    return { centroids, results, labels: e.labels(), resident: e.plan.residentRows };
  }

  it('re-seeds with the CPU backend\'s row, the same bits resident (15 chunks), partly streamed and streamed', async () => {
    const cpu = await run('cpu', 0);
    expect(cpu.results[1].counts[1]).toBe(0);
    expect(cpu.results[1].emptyReseeded).toBe(1);
    const reseeded = cpu.centroids[1].subarray(d, 2 * d);
    const full = await run('cuda', undefined);
    expect(full.resident).toBe(n);
    expect(full.results.map((r) => r.emptyReseeded)).toEqual([0, 1, 0, 0]);
    // the re-seeded centroid is a data row, taken as it is: the same bits as the CPU's choice
    expect(sameBits(full.centroids[1].subarray(d, 2 * d), reseeded)).toBe(true);
    for (let p = 0; p < 4; p++)
      for (let i = 0; i < k * d; i++)
        expect(Math.abs(full.centroids[p][i] - cpu.centroids[p][i]), `pass ${p} value ${i}`).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(cpu.centroids[p][i])));
    expect(Buffer.from(full.labels.buffer).equals(Buffer.from(cpu.labels.buffer))).toBe(true);
    for (const budget of [3 * chunk * 200, 0]) {
      const r = await run('cuda', budget);
      expect(r.resident).toBeLessThan(n);
      r.centroids.forEach((c, p) => expect(sameBits(c, full.centroids[p]), `budget ${budget}, pass ${p}`).toBe(true));
      expect(r.results.map((q) => q.inertia)).toEqual(full.results.map((q) => q.inertia));
      expect(r.results.map((q) => q.emptyReseeded)).toEqual([0, 1, 0, 0]);
    }
  });
});

describe('resident rows accumulated in one go = chunk by chunk', () => {
  it('D = 300 (sums apart from the distances), fp32 and fp16 products, and an assign pass\'s distances', async () => {
    const n = 20000, d = 300, k = 20, chunk = 2048;
    const x = blobData(n, d, 20, 91);
    const init = pickRows(x, d, distinctRows(n, k, 3));
    for (const precision of ['fp32', 'fp16'] as const) {
      const out: { c: Float32Array; dist: Float32Array; labels: Int32Array; resident: number }[] = [];
      for (const memoryBudget of [undefined, 0]) {
        const e = await open({ rows: n, dims: d, k, precision, chunkRows: chunk, ...(memoryBudget === undefined ? {} : { memoryBudget }) });
        e.setCentroids(init);
        await fit(e, bytesOf(x), n, 3);
        await runPass(e, bytesOf(x), n, 'assign', { distances: true, skipBelow: e.plan.residentRows });
        out.push({ c: e.centroids(), dist: e.distances(), labels: e.labels(), resident: e.plan.residentRows });
      }
      expect(out[0].resident).toBe(n);
      expect(out[1].resident).toBe(0);
      expect(sameBits(out[0].c, out[1].c), `${precision}: centroids`).toBe(true);
      expect(sameBits(out[0].dist, out[1].dist), `${precision}: distances`).toBe(true);
      expect(Buffer.from(out[0].labels.buffer).equals(Buffer.from(out[1].labels.buffer)), `${precision}: labels`).toBe(true);
    }
  });
});
