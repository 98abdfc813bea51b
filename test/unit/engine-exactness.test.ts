// The CPU engine against the float64 reference (test/helpers/reference.ts): from the same centroids, the same
// labels except true ties (two best distances within a relative 1e-6), inertia within 1e-6, the same update.
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, type EngineOptions, type PassResult } from '../../native/index.js';
import {
  assign, blobData, bytesOf, fromF16, isTie, meanVariance, normalData, normalizeRows, pickRows, Rng, runPass, toF16,
  update, type Metric,
} from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

async function open(o: Partial<EngineOptions> & Pick<EngineOptions, 'rows' | 'dims' | 'k'>): Promise<Engine> {
  const e = await Engine.open({ metric: 'l2', dtype: 'f32', backend: 'cpu', threads: 2, ...o });
  engines.push(e);
  return e;
}

function distinctRows(n: number, k: number, seed: number): number[] {
  const rng = new Rng(seed);
  const all = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [all[i], all[j]] = [all[j], all[i]];
  }
  return all.slice(0, k);
}

function relClose(a: number, b: number, rel: number, abs = 1e-12): boolean {
  return Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b)) + abs;
}

interface Case {
  name: string;
  x: Float32Array; // the values the engine sees (after f16 rounding for f16)
  input: Uint8Array; // bytes fed
  n: number;
  d: number;
  k: number;
  metric: Metric;
  dtype: 'f32' | 'f16' | 'bf16';
  chunk: number;
  init?: Float32Array;
}

/** Runs `passes` fit passes and one assign pass, checking every one against the reference. */
async function check(c: Case, passes = 3): Promise<void> {
  const e = await open({ rows: c.n, dims: c.d, k: c.k, metric: c.metric, dtype: c.dtype, chunkRows: c.chunk });
  const xr = c.metric === 'cosine' ? normalizeRows(c.x, c.n, c.d) : Float64Array.from(c.x);
  e.setCentroids(c.init ?? pickRows(c.x, c.d, distinctRows(c.n, c.k, 7)));
  let mismatches = 0, ties = 0;
  let prevLabels: Int32Array | undefined;
  for (let p = 0; p <= passes; p++) {
    const fit = p < passes;
    const before = e.centroids();
    const ref = assign(xr, c.n, c.d, before, c.k, c.metric);
    const r = await runPass<PassResult>(e, c.input, c.n, fit ? 'fit' : 'assign', { distances: !fit });
    const labels = e.labels();
    for (let i = 0; i < c.n; i++) {
      if (labels[i] === ref.labels[i]) continue;
      if (isTie(ref, i)) {
        ties++;
        continue;
      }
      mismatches++;
      if (mismatches < 5) console.error(`${c.name} pass ${p} row ${i}: engine ${labels[i]} reference ${ref.labels[i]} (d1 ${ref.d1[i]}, d2 ${ref.d2[i]})`);
    }
    expect(mismatches, `${c.name} pass ${p}: label mismatches outside ties`).toBe(0);
    expect(relClose(r.inertia, ref.inertia, 1e-6, 1e-9), `${c.name} pass ${p}: inertia ${r.inertia} vs ${ref.inertia}`).toBe(true);
    expect(r.reassigned).toBe(prevLabels ? labels.reduce((s, l, i) => s + (l !== prevLabels![i] ? 1 : 0), 0) : c.n);
    prevLabels = labels;
    if (ties === 0) {
      const refCounts = new Float64Array(c.k);
      ref.labels.forEach((l) => refCounts[l]++);
      expect(Array.from(r.counts)).toEqual(Array.from(refCounts));
    }
    const refVar = meanVariance(xr, c.n, c.d);
    expect(relClose(r.dataVariance, refVar, 1e-5, 1e-9), `${c.name}: dataVariance ${r.dataVariance} vs ${refVar}`).toBe(true);
    if (fit) {
      if (ties === 0) {
        const u = update(xr, c.n, c.d, before, c.k, ref, c.metric);
        const after = e.centroids();
        for (let j = 0; j < after.length; j++) {
          // cosine: rows are normalized in fp32 by the engine, in fp64 by the reference (~6e-8 per value)
          const scale = 1e-6 * Math.abs(u.centroids[j]) + (c.metric === 'cosine' ? 2e-7 : 1e-9);
          if (Math.abs(after[j] - u.centroids[j]) > scale) {
            throw new Error(`${c.name} pass ${p}: centroid value ${j} is ${after[j]}, reference ${u.centroids[j]}`);
          }
        }
        expect(r.emptyReseeded).toBe(u.emptyReseeded);
        let shift = 0;
        for (let j = 0; j < after.length; j++) shift += (after[j] - before[j]) ** 2;
        expect(relClose(r.shift, shift, 1e-9, 1e-12)).toBe(true);
      }
    } else {
      const dist = e.distances();
      for (let i = 0; i < c.n; i++) {
        if (labels[i] !== ref.labels[i]) continue;
        if (!relClose(dist[i], ref.dist[i], 2e-7, 1e-7)) throw new Error(`${c.name}: distance of row ${i} is ${dist[i]}, reference ${ref.dist[i]}`);
      }
      expect(r.shift).toBe(0);
    }
  }
}

function f32Case(name: string, x: Float32Array, n: number, d: number, k: number, metric: Metric, chunk: number, init?: Float32Array): Case {
  return { name, x, input: bytesOf(x), n, d, k, metric, dtype: 'f32', chunk, init };
}

describe('CPU engine = float64 reference (l2)', () => {
  for (const d of [1, 3, 17]) {
    for (const k of [1, 2, 10]) {
      it(`normal data, D=${d}, K=${k}, N=1000 in chunks of 128`, async () => {
        await check(f32Case(`normal d${d} k${k}`, normalData(1000, d, d * 31 + k), 1000, d, k, 'l2', 128));
      });
    }
  }
  it('D=1000, K=7, N=300 (chunks of 64)', async () => {
    await check(f32Case('normal d1000', normalData(300, 1000, 5), 300, 1000, 7, 'l2', 64));
  });
  it('one row, one cluster, one dimension', async () => {
    await check(f32Case('n=1', Float32Array.from([3.5]), 1, 1, 1, 'l2', 1), 2);
  });
  it('K=N: every row its own cluster', async () => {
    const x = normalData(200, 5, 9);
    await check(f32Case('k=n', x, 200, 5, 200, 'l2', 33), 2);
  });
  it('blobs, D=17, K=12, N=3001', async () => {
    await check(f32Case('blobs', blobData(3001, 17, 12, 4), 3001, 17, 12, 'l2', 500));
  });
  it('duplicate rows: ties go to the lowest index, empty clusters are re-seeded', async () => {
    const base = normalData(50, 4, 11);
    const x = new Float32Array(400 * 4);
    for (let i = 0; i < 400; i++) x.set(base.subarray((i % 50) * 4, (i % 50) * 4 + 4), i * 4);
    // centroids 0 and 1 identical (rows 0 and 50 are duplicates): cluster 1 starts empty
    const init = pickRows(x, 4, [0, 50, 3, 7, 20, 33]);
    await check(f32Case('duplicates', x, 400, 4, 6, 'l2', 64, init));
  });
  it('tiny values (~1e-21: products underflow fp32) and huge values (~1e19: squares overflow fp32) stay exact', async () => {
    const tiny = normalData(600, 6, 12).map((v) => v * 1e-21);
    await check(f32Case('tiny', Float32Array.from(tiny), 600, 6, 5, 'l2', 128), 2);
    const huge = normalData(600, 6, 13).map((v) => v * 1e19);
    await check(f32Case('huge', Float32Array.from(huge), 600, 6, 5, 'l2', 128), 2);
  });
  it('large offsets (values ~1e4 around a common mean) stay exact', async () => {
    const x = normalData(2000, 8, 3).map((v, i) => v + 1e4 * (1 + (i % 8)));
    await check(f32Case('offset', Float32Array.from(x), 2000, 8, 16, 'l2', 256));
  });
});

describe('CPU engine = float64 reference (cosine, f16)', () => {
  it('cosine, D=17, K=10', async () => {
    await check(f32Case('cosine', normalData(1500, 17, 21), 1500, 17, 10, 'cosine', 256));
  });
  it('cosine, D=3, K=2', async () => {
    await check(f32Case('cosine d3', normalData(999, 3, 22), 999, 3, 2, 'cosine', 100));
  });
  it('f16 input, D=17, K=10', async () => {
    const h = toF16(normalData(1200, 17, 23));
    const x = fromF16(h);
    await check({ name: 'f16', x, input: bytesOf(h), n: 1200, d: 17, k: 10, metric: 'l2', dtype: 'f16', chunk: 300 });
  });
});

describe('CPU engine = float64 reference (bf16)', () => {
  it('bf16 input, D=20, K=9', async () => {
    const f = normalData(900, 20, 24);
    const u = new Uint32Array(f.buffer.slice(0));
    const h = new Uint16Array(f.length);
    for (let i = 0; i < f.length; i++) h[i] = (u[i] + 0x7fff + ((u[i] >>> 16) & 1)) >>> 16; // round to nearest even
    const x = new Float32Array(new Uint32Array(Array.from(h, (v) => v << 16)).buffer);
    await check({ name: 'bf16', x, input: bytesOf(h), n: 900, d: 20, k: 9, metric: 'l2', dtype: 'bf16', chunk: 256 });
  });
});

describe('every kernel (KMFLEET_CPU_ISA) gives the reference labels', () => {
  for (const isa of ['generic', 'avx2', 'avx512', 'avx512bf16']) {
    it(isa, async () => {
      process.env.KMFLEET_CPU_ISA = isa;
      try {
        await check(f32Case(`isa ${isa}`, blobData(1000, 33, 40, 8, 2, 1), 1000, 33, 40, 'l2', 200), 2);
        await check(f32Case(`isa ${isa} normal`, normalData(700, 70, 8), 700, 70, 50, 'l2', 200), 1);
      } finally {
        delete process.env.KMFLEET_CPU_ISA;
      }
    });
  }
});
