/**
 * A job in fp16 or bf16 precision over f32 rows (native/src/row_narrowing.h): the engine rounds each row to that type
 * as it takes it, so the job is the job over the dataset stored in that type — the same bits, whichever tier holds the
 * rows — and its resident and host-tier rows take half the bytes. A value the type cannot hold fails the job naming
 * the row. test/gpu/engine-narrowed-rows-cuda.test.ts runs this file on a CUDA engine.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, NonFiniteInputError, type EngineOptions, type PassResult } from '../../native/index.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../core/formats/half.js';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { runKmeans, type KmeansSpec } from '../../core/kmeans/index.js';
import { runPass } from '../helpers/reference.js';

const backend = process.env.KMFLEET_TEST_BACKEND === 'cuda' ? 'cuda' : 'cpu';
const dir = mkdtempSync(join(tmpdir(), 'kmfleet-narrow-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
// 8 chunks of 1,000 rows and a short last one
const N = 8_211, D = 20, K = 7, CHUNK = 1_000;
let f32: string, f16: string;
beforeAll(async () => {
  // the generator writes its f16 file as the f32 one rounded to nearest even (core/formats/half.ts)
  f32 = (await generateDataset(join(dir, 'a.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 5, clusterStd: 3 })).path;
  f16 = (await generateDataset(join(dir, 'h.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 5, clusterStd: 3, dtype: 'f16' })).path;
});

const spec = (over: Partial<KmeansSpec> = {}): KmeansSpec => ({ k: K, metric: 'l2', init: 'random', maxIter: 10, tol: 0, tolReassign: 0, seed: 2, ...over });
const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

async function fit(path: string, s: KmeansSpec, engine: Partial<EngineOptions>) {
  const source = await LocalFileSource.open(path);
  const e = await Engine.open({ rows: source.rows, dims: source.dims, k: s.k, metric: s.metric, dtype: source.dtype, backend, threads: backend === 'cpu' ? 2 : undefined, chunkRows: CHUNK, ...engine });
  try {
    const result = await runKmeans({ engine: e, source, spec: s });
    return { result, labels: e.labels(), plan: e.plan };
  } finally {
    e.close();
    await source.close();
  }
}

function expectSameRun(a: Awaited<ReturnType<typeof fit>>, b: Awaited<ReturnType<typeof fit>>, name: string) {
  expect(bytes(a.result.centroids).equals(bytes(b.result.centroids)), name).toBe(true);
  expect(a.result.history.map(({ ms, settledFraction, ...h }) => h), name).toEqual(b.result.history.map(({ ms, settledFraction, ...h }) => h));
  expect(a.result.inertia, name).toBe(b.result.inertia);
  expect(bytes(a.labels).equals(bytes(b.labels)), name).toBe(true);
}

/** An f32 .npy of `rows` (each D values). */
function npy(name: string, rows: number[][]): string {
  const path = join(dir, name);
  writeFileSync(path, encodeNpy(Float32Array.from(rows.flat()), [rows.length, rows[0].length]));
  return path;
}

describe(`fp16 and bf16 jobs over f32 rows (${backend})`, () => {
  it('an fp16 job gives the bits of the job over the rows stored as f16, whichever tier holds them, in half the bytes', async () => {
    for (const s of [spec(), spec({ init: 'kmeans++' }), spec({ metric: 'cosine' })]) {
      const stored = await fit(f16, s, { precision: 'fp16', memoryBudget: 0, hostMemoryBudget: 0 });
      const runs = {
        resident: await fit(f32, s, { precision: 'fp16' }),
        fed: await fit(f32, s, { precision: 'fp16', memoryBudget: 0, hostMemoryBudget: 0 }),
        // 3 whole chunks in the host tier, the rest fed on every pass: its budget counts 2-byte values
        host: await fit(f32, s, { precision: 'fp16', memoryBudget: 0, hostMemoryBudget: 3 * CHUNK * D * 2 + 5 }),
      };
      expect(runs.resident.plan.residentRows).toBe(N);
      expect(runs.host.plan.hostRows).toBe(3 * CHUNK);
      for (const [name, run] of Object.entries(runs)) {
        expect(run.plan).toMatchObject({ rowBytes: D * 4, storedRowBytes: D * 2, keptDtype: 'f16' });
        expectSameRun(run, stored, `${s.metric} ${String(s.init)} ${name}`);
      }
      // summaries count the held rows' bytes as held
      expect(runs.host.result.tiers.heldRowBytes).toBe(D * 2);
    }
  });

  it('a bf16 job gives the bits of the rows rounded to bf16 in every tier', async () => {
    // the bf16 dataset written as f32: each value the f32 of its bf16 rounding
    const source = await LocalFileSource.open(f32);
    const raw = Buffer.alloc(N * D * 4);
    await source.read(0, N, raw);
    await source.close();
    const values = new Float32Array(raw.buffer, raw.byteOffset, N * D);
    const rounded = values.map((v) => bf16BitsToF32(f32ToBf16Bits(v)));
    expect(rounded.some((v, i) => v !== values[i])).toBe(true);
    const roundedPath = join(dir, 'rounded-bf16.npy');
    writeFileSync(roundedPath, encodeNpy(rounded, [N, D]));
    for (const s of [spec(), spec({ init: 'kmeans++' })]) {
      const reference = await fit(roundedPath, s, { precision: 'bf16', memoryBudget: 0, hostMemoryBudget: 0 });
      expect(reference.plan.keptDtype).toBe('bf16');
      for (const engine of [{}, { memoryBudget: 0 }, { memoryBudget: 0, hostMemoryBudget: 0 }]) {
        expectSameRun(await fit(f32, s, { precision: 'bf16', ...engine }), reference, `${String(s.init)} ${JSON.stringify(engine)}`);
      }
    }
  });

  it('rounds to nearest even, subnormals and the largest values included, as core/formats/half.ts does', async () => {
    // each row far from the others and its own centroid: one fit pass makes every centroid its rounded row
    const awkward = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -25, 2 ** -25 * 1.0001, 3 * 2 ** -25, 2 ** -15 + 2 ** -25, 65504, 65519.99, -(2 ** -24) * 1.5, 0.1, 1e-8];
    const rows = awkward.map((v, r) => [v, 1000 * r]);
    for (const [precision, toBits, fromBits] of [['fp16', f32ToF16Bits, f16BitsToF32], ['bf16', f32ToBf16Bits, bf16BitsToF32]] as const) {
      const e = await Engine.open({ rows: rows.length, dims: 2, k: rows.length, metric: 'l2', dtype: 'f32', backend, precision, threads: backend === 'cpu' ? 2 : undefined });
      try {
        e.setCentroids(Float32Array.from(rows.flat()));
        e.beginPass('fit');
        Buffer.from(Float32Array.from(rows.flat()).buffer).copy(e.buffer(0));
        await e.feed(0, 0, rows.length);
        await e.finishPass();
        const c = e.centroids();
        awkward.forEach((v, r) => expect(c[2 * r], `${precision} ${v}`).toBe(fromBits(toBits(v))));
      } finally {
        e.close();
      }
    }
  });

  it.skipIf(backend !== 'cpu')('rows loaded ahead of a pass are rounded too; a load keeps the rows before a value fp16 cannot hold, and the pass names it', async () => {
    const source = await LocalFileSource.open(f32);
    const raw = Buffer.alloc(N * D * 4);
    await source.read(0, N, raw);
    await source.close();
    const h = await LocalFileSource.open(f16);
    const raw16 = Buffer.alloc(N * D * 2);
    await h.read(0, N, raw16);
    await h.close();
    const init = Float32Array.from(new Float32Array(raw.buffer, raw.byteOffset, K * D), (v) => f16BitsToF32(f32ToF16Bits(v)));
    const open = (dtype: 'f32' | 'f16') => Engine.open({ rows: N, dims: D, k: K, metric: 'l2', dtype, backend, precision: 'fp16', threads: 2, chunkRows: CHUNK });
    const [loaded, stored] = [await open('f32'), await open('f16')];
    try {
      for (const e of [loaded, stored]) e.setCentroids(init);
      // in two blocks, out of order, as a download hands them over
      await loaded.loadRows(raw.subarray(4000 * D * 4), 4000, N - 4000);
      expect(await loaded.loadRows(raw.subarray(0, 4000 * D * 4), 0, 4000)).toBe(N);
      const a = await runPass<PassResult>(loaded, raw, N, 'fit', { skipBelow: N, sayFirstRow: true });
      const b = await runPass<PassResult>(stored, raw16, N, 'fit');
      expect(a.rowsFrom).toEqual({ resident: N, host: 0, fed: 0 });
      expect(bytes(loaded.centroids()).equals(bytes(stored.centroids()))).toBe(true);
      expect(a.inertia).toBe(b.inertia);
    } finally {
      loaded.close();
      stored.close();
    }
    const e = await open('f32');
    try {
      const bad = Buffer.from(raw);
      bad.writeFloatLE(1e6, (2500 * D + 3) * 4);
      expect(await e.loadRows(bad, 0, N)).toBe(2500);
      e.setCentroids(init);
      const err = await runPass(e, bad, N, 'fit', { skipBelow: 2500, sayFirstRow: true }).catch((x: unknown) => x);
      expect(err).toBeInstanceOf(NonFiniteInputError);
      expect((err as Error).message).toMatch(/^row 2500 feature 3: 1000000 is beyond the range of fp16/);
    } finally {
      e.close();
    }
  });

  it('a value beyond fp16 fails the job naming its row, also from the k-means++ sample and the random rows; bf16 holds it', async () => {
    const rows = Array.from({ length: 64 }, (_, r) => Array.from({ length: 4 }, (_, d) => r + d / 10));
    rows[37][2] = 70_000;
    const path = npy('big.npy', rows);
    for (const init of ['random', 'kmeans++'] as const) {
      for (const engine of [{}, { memoryBudget: 0, hostMemoryBudget: 0 }]) {
        const err = await fit(path, spec({ k: 60, init, maxIter: 2 }), { precision: 'fp16', chunkRows: 16, ...engine }).catch((e: unknown) => e);
        expect(err, `${init} ${JSON.stringify(engine)}`).toBeInstanceOf(NonFiniteInputError);
        expect((err as NonFiniteInputError).row).toBe(37);
        expect((err as Error).message).toMatch(/row 37 feature 2: 70000(\.0+)? is beyond the range of fp16 \(±65504\).*use precision bf16 or fp32/);
      }
    }
    const ok = await fit(path, spec({ k: 4, maxIter: 2 }), { precision: 'bf16', chunkRows: 16 });
    expect(ok.result.iterations).toBe(2);
  });
});
