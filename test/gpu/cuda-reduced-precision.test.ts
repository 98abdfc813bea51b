// fp16 and bf16 jobs on CUDA label their 16-bit rows exactly (cuda/planner.cpp opFor): a job in either precision is
// the exact job over its rows rounded to that type, bit for bit, so it converges as that job does. With one-product
// labels, rows near a tie between two centroids flipped as the centroids' fp16 roundings changed, and a job on
// clustered data never reached tol.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { runKmeans, type KmeansSpec } from '../../core/kmeans/index.js';
import { Engine, type PassResult, type Precision } from '../../native/index.js';
import { blobData, bytesOf, pickRows, toF16 } from '../helpers/reference.js';
import { distinctRows, engineTracker, fit } from './gpu-helpers.js';

const open = engineTracker();
const dir = mkdtempSync(join(tmpdir(), 'kmfleet-reduced-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** f32 → bf16 bit patterns, rounded to nearest even (as the engine rounds an f32 row for a bf16 job) */
function toBf16(x: Float32Array): Uint16Array {
  const u = new Uint32Array(x.buffer, x.byteOffset, x.length);
  return Uint16Array.from(u, (v) => (v + 0x7fff + ((v >>> 16) & 1)) >>> 16);
}

describe('fp16 and bf16 jobs on CUDA', () => {
  // two centroids a blob: many rows sit near a tie, where one-product labels flipped pass after pass
  const n = 40_009, d = 48, centers = 24, k = 48;
  const x = blobData(n, d, centers, 611, 8, 1);
  const init = pickRows(x, d, distinctRows(n, k, 612));

  for (const [precision, dtype, round] of [['fp16', 'f16', toF16], ['bf16', 'bf16', toBf16]] as const) {
    it(`${precision} over f32 rows is the exact job over the rows rounded to ${dtype}, bit for bit`, async () => {
      const passes = 25;
      const a = await open({ rows: n, dims: d, k, precision: precision as Precision, chunkRows: 8192 });
      const b = await open({ rows: n, dims: d, k, dtype, precision: 'fp32', chunkRows: 8192 });
      expect(a.plan.precision).toBe(precision);
      a.setCentroids(init);
      b.setCentroids(init);
      const ra: PassResult[] = await fit(a, bytesOf(x), n, passes);
      const rb: PassResult[] = await fit(b, bytesOf(round(x)), n, passes);
      expect(ra.map((r) => r.reassigned)).toEqual(rb.map((r) => r.reassigned));
      expect(ra.map((r) => r.inertia)).toEqual(rb.map((r) => r.inertia));
      expect(bytes(a.labels()).equals(bytes(b.labels()))).toBe(true);
      expect(bytes(a.centroids()).equals(bytes(b.centroids()))).toBe(true);
    });
  }

  it('an fp16 job on clustered data converges by tol, in the iterations of the fp32 job over its f16 rows', async () => {
    const rows = 60_000, dims = 32, blobs = 40;
    const src = { kind: 'blobs' as const, rows, dims, centers: blobs, seed: 613, clusterStd: 1 };
    const f32 = (await generateDataset(join(dir, 'x.npy'), src)).path;
    const f16 = (await generateDataset(join(dir, 'h.npy'), { ...src, dtype: 'f16' })).path;
    const spec: KmeansSpec = { k: 2 * blobs, metric: 'l2', init: 'random', maxIter: 300, tol: 1e-4, tolReassign: 0, seed: 5 };
    const run = async (path: string, precision: Precision) => {
      const source = await LocalFileSource.open(path);
      const engine = await Engine.open({ rows, dims, k: spec.k, metric: 'l2', dtype: source.dtype, backend: 'cuda', precision });
      try {
        const result = await runKmeans({ engine, source, spec });
        return { result, labels: engine.labels() };
      } finally {
        engine.close();
        await source.close();
      }
    };
    const half = await run(f32, 'fp16');
    const exact = await run(f16, 'fp32');
    expect(half.result.stopReason).toBe('tol');
    expect(half.result.iterations).toBeLessThan(spec.maxIter);
    expect(half.result.iterations).toBe(exact.result.iterations);
    expect(bytes(half.result.centroids).equals(bytes(exact.result.centroids))).toBe(true);
    expect(bytes(half.labels).equals(bytes(exact.labels))).toBe(true);
  });
});
