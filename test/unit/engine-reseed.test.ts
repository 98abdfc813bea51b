// A cluster that empties in the middle of a fit (not at the start) is re-seeded with the farthest row, the same
// row whatever the chunking or the resident/streamed split. Backends report the farthest rows only for passes
// that left a cluster empty (backend.h PassTotals.farthest), so this is the path that proves they still do.
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, type EngineOptions, type PassResult } from '../../native/index.js';
import { assign, bytesOf, runPass } from '../helpers/reference.js';
import { emptiesMidFit } from '../helpers/reseed-data.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

async function fit(o: Partial<EngineOptions>, passes: number) {
  const { x, n, d, k, init } = emptiesMidFit(6000);
  const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', ...o });
  engines.push(e);
  e.setCentroids(init);
  const results: PassResult[] = [];
  const centroids: Float32Array[] = [];
  for (let p = 0; p < passes; p++) {
    results.push(await runPass<PassResult>(e, bytesOf(x), n, 'fit', { skipBelow: p > 0 ? e.plan.residentRows : 0 }));
    centroids.push(e.centroids());
  }
  return { results, centroids, labels: e.labels() };
}

describe('a cluster that empties mid-fit', () => {
  it('is re-seeded with the farthest row (float64 reference), the same bits for any chunking or residency', async () => {
    const { x, n, d, k } = emptiesMidFit(6000);
    const base = await fit({ chunkRows: 6000, threads: 1 }, 4);
    expect(base.results[0].emptyReseeded).toBe(0);
    expect(Array.from(base.results[0].counts).every((c) => c > 0)).toBe(true);
    expect(base.results[1].counts[1]).toBe(0);
    expect(base.results[1].emptyReseeded).toBe(1);
    // the row farthest from its centroid under pass 1's centroids (ties: lowest row)
    const ref = assign(x, n, d, base.centroids[0], k, 'l2');
    let far = 0;
    for (let i = 1; i < n; i++) if (ref.dist[i] > ref.dist[far]) far = i;
    expect(Array.from(base.centroids[1].subarray(d, 2 * d))).toEqual(Array.from(x.subarray(far * d, (far + 1) * d)));
    expect(base.results[2].counts[1]).toBeGreaterThan(0);  // it took rows of its own

    for (const o of [
      { chunkRows: 777, threads: 2, memoryBudget: 0 },
      { chunkRows: 500, threads: 2, memoryBudget: 2500 * (d * 4 + 8) },
      { chunkRows: 1000, threads: 2 },
    ]) {
      const r = await fit(o, 4);
      const what = JSON.stringify(o);
      r.centroids.forEach((c, p) => expect(Buffer.from(c.buffer).equals(Buffer.from(base.centroids[p].buffer)), `${what}: pass ${p}`).toBe(true));
      expect(Buffer.from(r.labels.buffer).equals(Buffer.from(base.labels.buffer)), what).toBe(true);
      expect(r.results.map((p) => p.emptyReseeded)).toEqual(base.results.map((p) => p.emptyReseeded));
    }
  });
});
