// Both backends keep exact integer statistics on the same grid (native/src/cpu/exact_statistics.h,
// cuda/kernels/exact_sums.cuh) and update the centroids with the same arithmetic, so where their labels agree —
// exact fp32 labels agree except on near-ties, which well-separated blobs do not have — a CPU and a CUDA engine give
// the same centroids, inertia, counts and data variance, pass after pass: f32 and f16 rows, resident or streamed.
// (l2 only: each backend normalizes cosine rows with its own arithmetic.)
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, type EngineOptions, type PassResult } from '../../native/index.js';
import { blobData, bytesOf, pickRows, toF16 } from '../helpers/reference.js';
import { distinctRows, engineTracker, fit } from './gpu-helpers.js';

const openCuda = engineTracker();
const cpuEngines: Engine[] = [];
afterAll(() => cpuEngines.forEach((e) => e.close()));

const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);

const cases: { name: string; n: number; d: number; k: number; metric: 'l2'; dtype: 'f32' | 'f16'; memoryBudget?: number }[] = [
  { name: 'l2 f32, resident', n: 20_011, d: 37, k: 24, metric: 'l2', dtype: 'f32' },
  { name: 'l2 f16 rows, D = 128', n: 12_007, d: 128, k: 40, metric: 'l2', dtype: 'f16' },
  { name: 'l2 f32, some rows streamed', n: 15_001, d: 64, k: 16, metric: 'l2', dtype: 'f32', memoryBudget: 5000 * 64 * 4 },
];

describe('CPU and CUDA statistics', () => {
  for (const c of cases) {
    it(`give the same bits where the labels agree (${c.name})`, async () => {
      const x = blobData(c.n, c.d, c.k, 300 + c.d, 40, 0.5);
      const data = c.dtype === 'f16' ? bytesOf(toF16(x)) : bytesOf(x);
      const init = pickRows(x, c.d, distinctRows(c.n, c.k, 301));
      const o: EngineOptions = { rows: c.n, dims: c.d, k: c.k, metric: c.metric, dtype: c.dtype, precision: 'fp32', chunkRows: 4096 };
      const cpu = await Engine.open({ ...o, backend: 'cpu', ...(c.memoryBudget ? { memoryBudget: c.memoryBudget } : {}) });
      cpuEngines.push(cpu);
      const gpu = await openCuda({ ...o, ...(c.memoryBudget ? { memoryBudget: c.memoryBudget } : {}) });
      cpu.setCentroids(init);
      gpu.setCentroids(init);
      for (let pass = 1; pass <= 4; pass++) {
        const [h] = await fit(cpu, data, c.n, 1) as [PassResult];
        const [g] = await fit(gpu, data, c.n, 1) as [PassResult];
        const what = `${c.name}, pass ${pass}`;
        expect(gpu.labels(), `${what}: labels`).toEqual(cpu.labels());
        expect(Array.from(g.counts), `${what}: counts`).toEqual(Array.from(h.counts));
        expect(Object.is(g.inertia, h.inertia), `${what}: inertia ${g.inertia} vs ${h.inertia}`).toBe(true);
        expect(Object.is(g.dataVariance, h.dataVariance), `${what}: data variance`).toBe(true);
        expect(bits(gpu.centroids()), `${what}: centroids`).toEqual(bits(cpu.centroids()));
      }
    });
  }
});
