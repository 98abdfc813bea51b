// The CPU engine against scikit-learn's Lloyd (sklearn.cluster.KMeans, algorithm="lloyd", n_init=1, the same
// initial centroids): the same labels (except true ties), inertia and centroids after the same iterations.
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, type PassResult } from '../../native/index.js';
import { assign, blobData, bytesOf, isTie, normalData, pickRows, Rng, runPass } from '../helpers/reference.js';
import { sklearnKMeans, sklearnUnavailable } from '../helpers/sklearn.js';

const why = sklearnUnavailable();
if (why) console.warn(`engine-sklearn: skipped: ${why}`);

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

async function compare(x: Float32Array, n: number, d: number, k: number, maxIter: number, seed: number): Promise<void> {
  const rng = new Rng(seed);
  const rows = new Set<number>();
  while (rows.size < k) rows.add(rng.int(n));
  const init = pickRows(x, d, [...rows]);
  const sk = sklearnKMeans(x, n, d, init, k, maxIter);

  const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 777 });
  engines.push(e);
  e.setCentroids(init);
  // sklearn: nIter updates, then labels and inertia for the final centers
  for (let i = 0; i < sk.nIter; i++) await runPass<PassResult>(e, bytesOf(x), n, 'fit');
  const r = await runPass<PassResult>(e, bytesOf(x), n, 'assign');
  const centroids = e.centroids();
  const labels = e.labels();

  const ref = assign(Float64Array.from(x), n, d, centroids, k, 'l2');
  let mismatches = 0;
  for (let i = 0; i < n; i++) if (labels[i] !== sk.labels[i] && !isTie(ref, i)) mismatches++;
  expect(mismatches, 'labels that differ from sklearn outside true ties').toBe(0);
  expect(Math.abs(r.inertia - sk.inertia) / sk.inertia, `inertia ${r.inertia} vs sklearn ${sk.inertia}`).toBeLessThan(1e-6);
  let worst = 0;
  for (let j = 0; j < centroids.length; j++) {
    worst = Math.max(worst, Math.abs(centroids[j] - sk.centers[j]) / (Math.abs(sk.centers[j]) + 1e-3));
  }
  expect(worst, 'largest relative centroid difference').toBeLessThan(1e-5);
}

describe.skipIf(why !== null)('CPU engine = scikit-learn Lloyd', () => {
  it('blobs: N=4000, D=16, K=20, up to 10 iterations', async () => {
    await compare(blobData(4000, 16, 20, 1, 5, 1), 4000, 16, 20, 10, 3);
  });
  it('normal data: N=3000, D=8, K=10, 5 iterations', async () => {
    await compare(normalData(3000, 8, 2), 3000, 8, 10, 5, 4);
  });
  it('normal data: N=2000, D=40, K=64, 3 iterations', async () => {
    await compare(normalData(2000, 40, 5), 2000, 40, 64, 3, 6);
  });
});
