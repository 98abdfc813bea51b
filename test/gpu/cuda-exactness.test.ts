// The CUDA backend against the float64 reference (test/helpers/reference.ts), through the real addon:
// fp32 labels equal the reference except true ties, inertia/counts/centroids/distances as the CPU engine's.
import { describe, expect, it } from 'vitest';

import { gpuInfo, type PassResult } from '../../native/index.js';
import {
  assign, blobData, bytesOf, fromF16, isTie, normalData, normalizeRows, pickRows, runPass, toF16, update,
  type Metric,
} from '../helpers/reference.js';
import { distinctRows, engineTracker } from './gpu-helpers.js';

const openCuda = engineTracker();

function relClose(a: number, b: number, rel: number, abs = 1e-12): boolean {
  return Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b)) + abs;
}

interface Case {
  name: string;
  x: Float32Array;
  input: Uint8Array;
  n: number;
  d: number;
  k: number;
  metric: Metric;
  dtype: 'f32' | 'f16';
  chunk: number;
  init?: Float32Array;
}

async function check(c: Case, passes = 2): Promise<void> {
  const e = await openCuda({ rows: c.n, dims: c.d, k: c.k, metric: c.metric, dtype: c.dtype, chunkRows: c.chunk, precision: 'fp32' });
  expect(e.plan.backend).toBe('cuda');
  const xr = c.metric === 'cosine' ? normalizeRows(c.x, c.n, c.d) : Float64Array.from(c.x);
  e.setCentroids(c.init ?? pickRows(c.x, c.d, distinctRows(c.n, c.k, 7)));
  for (let p = 0; p <= passes; p++) {
    const fit = p < passes;
    const before = e.centroids();
    const ref = assign(xr, c.n, c.d, before, c.k, c.metric);
    const skipBelow = p === 0 ? 0 : e.plan.residentRows;
    const r = await runPass<PassResult>(e, c.input, c.n, fit ? 'fit' : 'assign', { distances: !fit, skipBelow });
    const labels = e.labels();
    let mismatches = 0, ties = 0;
    for (let i = 0; i < c.n; i++) {
      if (labels[i] === ref.labels[i]) continue;
      if (isTie(ref, i)) { ties++; continue; }
      mismatches++;
      if (mismatches < 5) console.error(`${c.name} pass ${p} row ${i}: cuda ${labels[i]} reference ${ref.labels[i]} (d1 ${ref.d1[i]}, d2 ${ref.d2[i]})`);
    }
    expect(mismatches, `${c.name} pass ${p}: label mismatches outside ties`).toBe(0);
    expect(relClose(r.inertia, ref.inertia, 1e-6, 1e-9), `${c.name} pass ${p}: inertia ${r.inertia} vs ${ref.inertia}`).toBe(true);
    if (ties === 0) {
      const refCounts = new Float64Array(c.k);
      ref.labels.forEach((l) => refCounts[l]++);
      expect(Array.from(r.counts)).toEqual(Array.from(refCounts));
    }
    if (fit && ties === 0) {
      const u = update(xr, c.n, c.d, before, c.k, ref, c.metric);
      const after = e.centroids();
      for (let j = 0; j < after.length; j++) {
        const tol = 1e-6 * Math.abs(u.centroids[j]) + (c.metric === 'cosine' ? 2e-7 : 1e-9);
        if (Math.abs(after[j] - u.centroids[j]) > tol) throw new Error(`${c.name} pass ${p}: centroid ${j} is ${after[j]}, reference ${u.centroids[j]}`);
      }
      expect(r.emptyReseeded).toBe(u.emptyReseeded);
    }
    if (!fit) {
      const dist = e.distances();
      for (let i = 0; i < c.n; i++) {
        if (labels[i] !== ref.labels[i]) continue;
        if (!relClose(dist[i], ref.dist[i], 2e-7, 1e-7)) throw new Error(`${c.name}: distance of row ${i} is ${dist[i]}, reference ${ref.dist[i]}`);
      }
    }
  }
}

function f32Case(name: string, x: Float32Array, n: number, d: number, k: number, metric: Metric, chunk: number, init?: Float32Array): Case {
  return { name, x, input: bytesOf(x), n, d, k, metric, dtype: 'f32', chunk, init };
}

describe('gpuInfo', () => {
  it('sees the GPU', () => {
    const g = gpuInfo();
    expect(g.available, g.reason).toBe(true);
    expect(g.devices.length).toBeGreaterThan(0);
    expect(g.devices[0].totalMemory).toBeGreaterThan(1e9);
  });
});

describe('CUDA fp32 = float64 reference (awkward shapes, N not a multiple of any tile)', () => {
  for (const d of [1, 3, 17, 100]) {
    for (const k of [1, 7, 100]) {
      it(`normal, D=${d}, K=${k}, N=3001 in chunks of 1000`, async () => {
        await check(f32Case(`normal d${d} k${k}`, normalData(3001, d, d * 31 + k), 3001, d, k, 'l2', 1000));
      });
    }
  }
  it('blobs D=17 K=1000 N=5003', async () => {
    await check(f32Case('blobs k1000', blobData(5003, 17, 40, 4), 5003, 17, 1000, 'l2', 2048), 1);
  });
  it('D=1000, K=7, N=2003', async () => {
    await check(f32Case('d1000', normalData(2003, 1000, 5), 2003, 1000, 7, 'l2', 512));
  });
  it('D=4096, K=7, N=1001', async () => {
    await check(f32Case('d4096', blobData(1001, 4096, 5, 6), 1001, 4096, 7, 'l2', 300), 1);
  });
  it('blobs D=200, K=300, N=6007 (exact mode on 128-row Hopper blocks: Dp = 256)', async () => {
    await check(f32Case('blobs d200', blobData(6007, 200, 25, 12), 6007, 200, 300, 'l2', 2048), 1);
  });
  it('blobs D=128, K=1000, N=10007', async () => {
    await check(f32Case('blobs d128', blobData(10007, 128, 30, 9), 10007, 128, 1000, 'l2', 4096), 1);
  });
  it('large offsets (values ~1e4) stay exact', async () => {
    const x = normalData(4000, 8, 3).map((v, i) => v + 1e4 * (1 + (i % 8)));
    await check(f32Case('offset', Float32Array.from(x), 4000, 8, 16, 'l2', 1024));
  });
  it('duplicate rows: ties to the lowest index, empty clusters re-seeded', async () => {
    const base = normalData(50, 4, 11);
    const x = new Float32Array(400 * 4);
    for (let i = 0; i < 400; i++) x.set(base.subarray((i % 50) * 4, (i % 50) * 4 + 4), i * 4);
    await check(f32Case('duplicates', x, 400, 4, 6, 'l2', 64, pickRows(x, 4, [0, 50, 3, 7, 20, 33])));
  });
  it('K=1,000,000 (sampled reference rows)', async () => {
    const n = 1_000_003, d = 4, k = 1_000_000;
    const x = normalData(n, d, 78);
    const e = await openCuda({ rows: n, dims: d, k, chunkRows: 262144 });
    const init = x.slice(0, k * d);
    e.setCentroids(init);
    const r = await runPass<PassResult>(e, bytesOf(x), n, 'fit');
    expect(r.counts.reduce((a, b) => a + b, 0)).toBe(n);
    const labels = e.labels();
    const xs = Float64Array.from(x);
    let bad = 0;
    for (let s = 0; s < 60; s++) {
      const i = (s * 16661) % n;
      const a = assign(xs.subarray(i * d, (i + 1) * d), 1, d, init, k, 'l2');
      if (a.labels[0] !== labels[i] && !isTie(a, 0)) bad++;
    }
    expect(bad).toBe(0);
  });
  it('K=65536 (sampled reference rows)', async () => {
    const n = 65600, d = 3, k = 65536;
    const x = normalData(n, d, 77);
    const e = await openCuda({ rows: n, dims: d, k, chunkRows: 20000 });
    const init = pickRows(x, d, distinctRows(n, k, 3));
    e.setCentroids(init);
    await runPass<PassResult>(e, bytesOf(x), n, 'assign');
    const labels = e.labels();
    const xs = Float64Array.from(x);
    let bad = 0;
    for (let s = 0; s < 300; s++) {
      const i = (s * 7919) % n;
      const a = assign(xs.subarray(i * d, (i + 1) * d), 1, d, init, k, 'l2');
      if (a.labels[0] !== labels[i] && !isTie(a, 0)) bad++;
    }
    expect(bad).toBe(0);
  });
});

describe('CUDA fp32: cosine and f16 input', () => {
  it('cosine D=17 K=10', async () => {
    await check(f32Case('cosine', normalData(1500, 17, 21), 1500, 17, 10, 'cosine', 256));
  });
  it('cosine D=100 K=64 blobs', async () => {
    await check(f32Case('cosine blobs', blobData(4000, 100, 20, 22), 4000, 100, 64, 'cosine', 1000));
  });
  it('f16 input, precision fp32: exact', async () => {
    const h = toF16(normalData(3000, 17, 23));
    await check({ name: 'f16', x: fromF16(h), input: bytesOf(h), n: 3000, d: 17, k: 10, metric: 'l2', dtype: 'f16', chunk: 1000 });
  });
});
