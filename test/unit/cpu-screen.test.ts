// The CPU backend's bf16 screen (KMFLEET_CPU_ISA=avx512bf16, native/src/cpu/kernels_avx512bf16.cpp) and its fp32
// kernel (avx512) against the float64 reference on fresh random data each run (the seed is in every message): shapes
// that cut every block of the kernels (D odd or not a multiple of 16, K not a multiple of 8, N not a multiple of 32,
// several K-panels), rows closer to a boundary than bf16 can tell (the bound must send them to fp64), and more
// equal centroids than the screen keeps candidates (the fp32 path). On a CPU without AVX-512 BF16 the engine falls
// back to the fp32 kernels, which must pass too; so does a shape below D = 48, where the backend uses the fp32 kernel.
import { randomInt } from 'node:crypto';

import { afterAll, describe, expect, it } from 'vitest';

import { Engine, type PassResult } from '../../native/index.js';
import { assign, bytesOf, isTie, normalData, pickRows, Rng, runPass } from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

async function labelsOf(isa: string, x: Float32Array, n: number, d: number, c: Float32Array, k: number, threads: number): Promise<Int32Array> {
  process.env.KMFLEET_CPU_ISA = isa;
  try {
    const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', threads, chunkRows: 257 });
    engines.push(e);
    e.setCentroids(c);
    await runPass<PassResult>(e, bytesOf(x), n, 'assign');
    return e.labels();
  } finally {
    delete process.env.KMFLEET_CPU_ISA;
  }
}

function expectReference(what: string, labels: Int32Array, x: Float32Array, n: number, d: number, c: Float32Array, k: number): void {
  const ref = assign(Float64Array.from(x), n, d, c, k, 'l2');
  let bad = 0;
  for (let i = 0; i < n; i++) {
    if (labels[i] === ref.labels[i] || isTie(ref, i)) continue;
    if (++bad <= 3) console.error(`${what} row ${i}: engine ${labels[i]}, reference ${ref.labels[i]} (d1 ${ref.d1[i]}, d2 ${ref.d2[i]})`);
  }
  expect(bad, `${what}: label mismatches outside ties`).toBe(0);
}

/** Rows on the boundary of two centroids, moved towards one by a relative 1e-5: far below bf16's 2^-8. */
function boundaryRows(c: Float32Array, k: number, d: number, n: number, rng: Rng): Float32Array {
  const x = new Float32Array(n * d);
  for (let i = 0; i < n; i++) {
    const a = rng.int(k);
    let b = rng.int(k);
    if (b === a) b = (a + 1) % k;
    const t = 0.5 + (rng.uniform() - 0.5) * 2e-5;
    for (let j = 0; j < d; j++) x[i * d + j] = c[a * d + j] * t + c[b * d + j] * (1 - t);
  }
  return x;
}

const seed = randomInt(1, 2 ** 31);

describe(`the bf16 screen and the fp32 kernel = float64 reference (seed ${seed})`, () => {
  const shapes: [number, number, number][] = [[1001, 1, 3], [517, 49, 9], [999, 33, 17], [300, 255, 70], [197, 300, 130], [2000, 64, 256], [611, 97, 31]];
  for (const isa of ['avx512bf16', 'avx512']) {
    for (const [n, d, k] of shapes) {
      it(`${isa}: N=${n}, D=${d}, K=${k}, random normal rows`, async () => {
        const x = normalData(n, d, seed + d * 7 + k);
        const c = normalData(k, d, seed + 1 + d).map((v) => v * 0.3);
        for (const threads of [1, 2]) expectReference(`${isa} ${n}×${d} k=${k} t=${threads} seed ${seed}`, await labelsOf(isa, x, n, d, c, k, threads), x, n, d, c, k);
      });
    }
    it(`${isa}: rows a relative 1e-5 off the boundary of two centroids`, async () => {
      const rng = new Rng(seed);
      for (const [n, d, k] of [[700, 48, 12], [333, 129, 41]]) {
        const c = normalData(k, d, seed + 2 + d);
        const x = boundaryRows(c, k, d, n, rng);
        expectReference(`${isa} boundary ${n}×${d} k=${k} seed ${seed}`, await labelsOf(isa, x, n, d, c, k, 2), x, n, d, c, k);
      }
    });
    it(`${isa}: more equal nearest centroids than the screen keeps (ties to the lowest index)`, async () => {
      const n = 400, d = 50, k = 40;
      const x = normalData(n, d, seed + 3);
      const c = pickRows(normalData(k, d, seed + 4), d, Array.from({ length: k }, (_, i) => (i % 2 === 0 ? 0 : i)));
      const labels = await labelsOf(isa, x, n, d, c, k, 2);
      expectReference(`${isa} equal centroids seed ${seed}`, labels, x, n, d, c, k);
      // 20 copies of centroid 0: a row nearest to them is labelled 0, never a later copy
      for (let i = 0; i < n; i++) expect(labels[i] === 0 || labels[i] % 2 === 1, `row ${i}: label ${labels[i]}`).toBe(true);
    });
  }
});

describe(`the bf16 screen changes no bit (seed ${seed})`, () => {
  it('3 fit passes at D=64, K=50: the same centroids and labels as the generic kernel, 1 and 2 threads', async () => {
    const n = 3000, d = 64, k = 50;
    const x = normalData(n, d, seed + 5);
    const init = pickRows(x, d, Array.from({ length: k }, (_, i) => i * 13));
    const fit = async (isa: string, threads: number) => {
      process.env.KMFLEET_CPU_ISA = isa;
      try {
        const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', threads, chunkRows: 700 });
        engines.push(e);
        e.setCentroids(init);
        for (let p = 0; p < 3; p++) await runPass<PassResult>(e, bytesOf(x), n, 'fit');
        return { device: e.plan.device, centroids: Array.from(new Uint32Array(e.centroids().buffer)), labels: Array.from(e.labels()) };
      } finally {
        delete process.env.KMFLEET_CPU_ISA;
      }
    };
    const ref = await fit('generic', 1);
    for (const threads of [1, 2]) {
      const r = await fit('avx512bf16', threads);
      expect(r.centroids, `${r.device}: centroid bits`).toEqual(ref.centroids);
      expect(r.labels, `${r.device}: labels`).toEqual(ref.labels);
    }
  });
});
