/**
 * The CPU backend's bounds (native/src/cpu/row_bounds.h): the rows whose bounds prove their label unchanged skip the
 * distance work, and a run gives the bits of the same run without bounds — labels, centroids, inertia, every
 * iteration — whatever the tiers, the metric, the kernels (KMFLEET_CPU_ISA), and however the centroids moved.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions, type PassResult } from '../../native/index.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { runKmeans, type KmeansSpec } from '../../core/kmeans/index.js';
import { blobData, bytesOf, pickRows, runPass } from '../helpers/reference.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-bounds-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => {
  delete process.env.KMFLEET_CPU_ISA;
});

const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
const spec = (over: Partial<KmeansSpec> = {}): KmeansSpec => ({ k: 24, metric: 'l2', init: 'random', maxIter: 25, tol: 0, tolReassign: 0, seed: 4, ...over });

async function blobs(name: string, rows: number, dims: number, centers: number, clusterStd: number): Promise<string> {
  return (await generateDataset(join(dir, name), { kind: 'blobs', rows, dims, centers, seed: 11, clusterStd })).path;
}

async function fit(path: string, s: KmeansSpec, engine: Partial<EngineOptions>) {
  const source = await LocalFileSource.open(path);
  const e = await Engine.open({ rows: source.rows, dims: source.dims, k: s.k, metric: s.metric, dtype: source.dtype, backend: 'cpu', threads: 2, chunkRows: 2000, ...engine });
  try {
    const result = await runKmeans({ engine: e, source, spec: s });
    return { result, labels: e.labels(), device: e.plan.device };
  } finally {
    e.close();
    await source.close();
  }
}

type Run = Awaited<ReturnType<typeof fit>>;
const history = (r: Run) => r.result.history.map(({ ms, settledFraction, ...h }) => h);

function expectSameBits(a: Run, b: Run, name: string) {
  expect(bytes(a.result.centroids).equals(bytes(b.result.centroids)), `${name}: centroids`).toBe(true);
  expect(bytes(a.labels).equals(bytes(b.labels)), `${name}: labels`).toBe(true);
  expect(a.result.inertia, `${name}: inertia`).toBe(b.result.inertia);
  expect(history(a), `${name}: history`).toEqual(history(b));
}

describe('bounds on the CPU backend', () => {
  it('settle most rows of clustered data once it converges, with the bits of a run without them', async () => {
    // D = 24 runs the fp32 kernel alone; D = 64 the bf16 screen first where the CPU has AVX-512 BF16
    for (const dims of [24, 64]) {
      const path = await blobs(`blobs-${dims}.npy`, 12_345, dims, 24, 1.5);
      for (const s of [spec(), spec({ init: 'kmeans++', seed: 9 }), spec({ metric: 'cosine' })]) {
        const name = `D=${dims} ${s.metric} ${String(s.init)}`;
        const off = await fit(path, s, { bounds: 'off' });
        const on = await fit(path, s, {});
        expectSameBits(on, off, name);
        expect(off.result.history.every((h) => h.settledFraction === 0), name).toBe(true);
        expect(on.result.iterations, name).toBeGreaterThan(1);
        const late = on.result.history.slice(1).slice(-5).map((h) => h.settledFraction!);
        expect(Math.min(...late), `${name}: ${late}`).toBeGreaterThan(0.5);
        expect(on.result.history[0].settledFraction, name).toBe(0); // the first pass has no bounds yet
      }
    }
  });

  it('give the same bits whatever tier holds the rows and whichever kernels run', async () => {
    const path = await blobs('blobs-tiers.npy', 9_001, 48, 16, 2);
    const s = spec({ k: 16, maxIter: 15 });
    const reference = await fit(path, s, { bounds: 'off' });
    for (const isa of ['generic', 'avx2', 'avx512', '']) {
      if (isa) process.env.KMFLEET_CPU_ISA = isa;
      else delete process.env.KMFLEET_CPU_ISA;
      for (const engine of [{}, { memoryBudget: 0 }, { memoryBudget: 0, hostMemoryBudget: 0 }, { memoryBudget: 3000 * (48 * 4 + 8), chunkRows: 777 }]) {
        const run = await fit(path, s, engine);
        expectSameBits(run, reference, `${run.device} ${JSON.stringify(engine)}`);
        expect(run.result.history.at(-1)!.settledFraction, run.device).toBeGreaterThan(0.5);
      }
    }
  });

  it('stay exact when centroids jump (setCentroids by the caller, a duplicate re-seeded)', async () => {
    const n = 6_000, d = 16, k = 40;
    const x = blobData(n, d, k, 5);
    const rows = Array.from({ length: k }, (_, i) => i * 97);
    rows[1] = rows[0]; // a duplicate centroid: one of the two empties and is re-seeded
    const init = pickRows(x, d, rows);
    const run = async (bounds: 'auto' | 'off') => {
      const e = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', threads: 2, chunkRows: 1000, bounds });
      try {
        e.setCentroids(init);
        const out: { r: PassResult; c: Float32Array }[] = [];
        for (let p = 0; p < 12; p++) {
          if (p === 6) {
            // a caller's jump: half the centroids moved far, two swapped
            const c = e.centroids();
            for (let i = 0; i < (k / 2) * d; i++) c[i] += 3 * Math.sin(i);
            for (let j = 0; j < d; j++) [c[2 * d + j], c[3 * d + j]] = [c[3 * d + j], c[2 * d + j]];
            e.setCentroids(c);
          }
          const r = await runPass<PassResult>(e, bytesOf(x), n, p === 11 ? 'assign' : 'fit', { distances: p === 11 });
          out.push({ r, c: e.centroids() });
        }
        return { out, labels: e.labels(), distances: e.distances() };
      } finally {
        e.close();
      }
    };
    const [on, off] = [await run('auto'), await run('off')];
    expect(on.out.reduce((a, p) => a + p.r.emptyReseeded, 0)).toBeGreaterThan(0);
    on.out.forEach((p, i) => {
      const { ms: _a, rowsSettled: _b, counts: ca, ...ra } = p.r;
      const { ms: _c, rowsSettled: _d, counts: cb, ...rb } = off.out[i].r;
      expect(ra, `pass ${i}`).toEqual(rb);
      expect(Array.from(ca), `pass ${i}`).toEqual(Array.from(cb));
      expect(bytes(p.c).equals(bytes(off.out[i].c)), `pass ${i}: centroids`).toBe(true);
    });
    expect(bytes(on.labels).equals(bytes(off.labels))).toBe(true);
    expect(bytes(on.distances).equals(bytes(off.distances))).toBe(true);
    expect(off.out.every((p) => p.r.rowsSettled === 0)).toBe(true);
    expect(on.out.slice(1, 6).some((p) => p.r.rowsSettled > 0)).toBe(true);
    expect(on.out.slice(7).some((p) => p.r.rowsSettled > 0)).toBe(true); // after the jump, from the moved bounds
  });
});
