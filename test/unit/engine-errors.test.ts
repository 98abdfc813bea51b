// Every error the engine reports: typed (native/index.ts classes), a message that names the values, never a crash.
import { afterAll, describe, expect, it } from 'vitest';

import {
  DeviceError, Engine, gpuInfo, InvalidArgumentError, NonFiniteInputError, OutOfMemoryError,
  type EngineOptions, type PassResult,
} from '../../native/index.js';
import { bytesOf, normalData, pickRows, runPass, toF16 } from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

async function open(o: Partial<EngineOptions> = {}): Promise<Engine> {
  const e = await Engine.open({ rows: 1000, dims: 4, k: 3, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 100, threads: 2, memoryBudget: 0, ...o });
  engines.push(e);
  return e;
}

async function rejects(p: Promise<unknown>, cls: new (...a: never[]) => Error, message: RegExp): Promise<Error> {
  const err = await p.then(() => null, (e: unknown) => e as Error);
  expect(err, `expected a ${cls.name}`).toBeInstanceOf(cls);
  expect(err!.message).toMatch(message);
  return err!;
}

function throws(f: () => unknown, cls: new (...a: never[]) => Error, message: RegExp): void {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err, `expected a ${cls.name}`).toBeInstanceOf(cls);
  expect((err as Error).message).toMatch(message);
}

describe('Engine.open validation', () => {
  const base = { rows: 10, dims: 3, k: 2, metric: 'l2', dtype: 'f32', backend: 'cpu' } as const;
  it.each([
    [{ k: 0 }, /k must be >= 1, got 0/],
    [{ k: 11 }, /k must be <= rows, got k=11 with rows=10/],
    [{ dims: 0 }, /dims must be >= 1, got 0/],
    [{ rows: 0, k: 0 }, /must be >= 1, got 0/],
    [{ rows: 2.5 }, /rows must be an integer, got 2.5/],
    [{ metric: 'manhattan' }, /metric must be one of 'l2', 'cosine', got 'manhattan'/],
    [{ dtype: 'f64' }, /dtype must be one of 'f32', 'f16', 'bf16', got 'f64'/],
    [{ chunkRows: 0 }, /chunkRows must be >= 1, got 0/],
    [{ threads: -1 }, /threads must be >= 1, got -1/],
  ])('%o', async (patch, msg) => {
    await rejects(Engine.open({ ...base, ...(patch as object) } as EngineOptions), InvalidArgumentError, msg);
  });

  it('memory that cannot be allocated is an OutOfMemoryError with the numbers', async () => {
    await rejects(Engine.open({ ...base, rows: 2 ** 40, dims: 4 }), OutOfMemoryError, /cannot allocate \d+ bytes/);
  });

  it("backend 'cuda' without a usable GPU is a DeviceError", async () => {
    if (gpuInfo().available) return; // only meaningful without a GPU
    await rejects(Engine.open({ ...base, backend: 'cuda' }), DeviceError, /CUDA|cuda|device/);
  });
});

describe('centroids', () => {
  it('wrong length, non-finite, zero (cosine)', async () => {
    const e = await open();
    throws(() => e.setCentroids(new Float32Array(11)), InvalidArgumentError, /k\*dims = 12 values \(k=3, dims=4\), got 11/);
    const bad = new Float32Array(12);
    bad[6] = NaN;
    throws(() => e.setCentroids(bad), InvalidArgumentError, /centroid 1 has a non-finite value at feature 2/);
    throws(() => e.centroids(), InvalidArgumentError, /no centroids yet/);
    throws(() => e.beginPass('fit'), InvalidArgumentError, /beginPass needs centroids/);
    const c = await open({ metric: 'cosine' });
    const z = Float32Array.from({ length: 12 }, (_, i) => (i >= 4 && i < 8 ? 0 : 1));
    throws(() => c.setCentroids(z), InvalidArgumentError, /centroid 1 has zero norm/);
  });
});

describe('feeds', () => {
  it('out of range, out of sequence, busy buffer, no pass — and the pass goes on afterwards', async () => {
    const x = normalData(1000, 4, 1);
    const e = await open();
    e.setCentroids(pickRows(x, 4, [0, 1, 2]));
    await rejects(e.feed(0, 0, 100), InvalidArgumentError, /feed outside a pass/);
    e.beginPass('fit');
    await rejects(e.feed(2, 0, 100), InvalidArgumentError, /buffer index must be in 0..1, got 2/);
    await rejects(e.feed(0, 0, 0), InvalidArgumentError, /rowCount must be in 1..100 \(chunkRows\), got 0/);
    await rejects(e.feed(0, 0, 101), InvalidArgumentError, /rowCount must be in 1..100/);
    await rejects(e.feed(0, 950, 100), InvalidArgumentError, /rows \[950, 1050\) are out of range: the dataset has 1000 rows/);
    await rejects(e.feed(0, 100, 100), InvalidArgumentError, /feed out of sequence: expected firstRow 0, got 100/);
    const bytes = bytesOf(x);
    e.buffer(0).set(bytes.subarray(0, 1600));
    const first = e.feed(0, 0, 100);
    await rejects(e.feed(0, 100, 100), InvalidArgumentError, /buffer 0 is still being fed/);
    await first;
    for (let r = 100, b = 1; r < 1000; r += 100, b ^= 1) {
      e.buffer(b).set(bytes.subarray(r * 16, (r + 100) * 16));
      await e.feed(b, r, 100);
    }
    const r = await e.finishPass();
    expect(r.reassigned).toBe(1000);
    expect(Array.from(r.counts).reduce((a, b) => a + b)).toBe(1000);
    await rejects(e.finishPass(), InvalidArgumentError, /finishPass without a pass/);
  });

  it('a NaN names its row; nothing is accumulated; the engine works afterwards', async () => {
    const x = normalData(1000, 4, 2);
    const e = await open();
    const init = pickRows(x, 4, [0, 1, 2]);
    e.setCentroids(init);
    const bad = Float32Array.from(x);
    bad[1234 / 2 * 4 + 2] = NaN; // row 617
    const err = await rejects(runPass(e, bytesOf(bad), 1000, 'fit'), NonFiniteInputError, /row 617 has a non-finite value/);
    expect((err as NonFiniteInputError).row).toBe(617);
    expect(Array.from(e.centroids())).toEqual(Array.from(init));
    await rejects(e.finishPass(), NonFiniteInputError, /row 617/); // the failed pass stays failed
    const good = await runPass<PassResult>(e, bytesOf(x), 1000, 'fit');
    expect(good.reassigned).toBe(1000);
    expect(Number.isFinite(good.inertia)).toBe(true);
    expect(good.update).toBe('host');  // the CPU backend has no device-side update (backend.h DeviceUpdate)
  });

  it('Inf in f16 input, zero row in cosine', async () => {
    const x = normalData(300, 4, 3);
    const h = toF16(x);
    h[299 * 4] = 0x7c00; // +Inf in the last row
    const e = await open({ rows: 300, dtype: 'f16' });
    e.setCentroids(pickRows(x, 4, [0, 1, 2]));
    const err = await rejects(runPass(e, bytesOf(h), 300, 'assign'), NonFiniteInputError, /row 299/);
    expect((err as NonFiniteInputError).row).toBe(299);
    const c = await open({ rows: 300, metric: 'cosine' });
    c.setCentroids(pickRows(x, 4, [0, 1, 2]));
    const z = Float32Array.from(x);
    z.fill(0, 150 * 4, 151 * 4);
    await rejects(runPass(c, bytesOf(z), 300, 'fit'), InvalidArgumentError, /row 150 has zero norm/);
  });

  it('labels, distances and buffers out of range; after close', async () => {
    const x = normalData(1000, 4, 4);
    const e = await open();
    e.setCentroids(pickRows(x, 4, [0, 1, 2]));
    throws(() => e.buffer(2), InvalidArgumentError, /buffer index must be in 0..1, got 2/);
    throws(() => e.labels(990, 20), InvalidArgumentError, /out of range: the dataset has 1000 rows/);
    await runPass(e, bytesOf(x), 1000, 'fit');
    throws(() => e.distances(), InvalidArgumentError, /only after an assign pass with \{ distances: true \}/);
    await runPass(e, bytesOf(x), 1000, 'assign', { distances: true });
    expect(e.distances(0, 10).length).toBe(10);
    const buf = e.buffer(0);
    expect(buf.length).toBe(100 * 16);
    e.close();
    e.close();
    expect(buf.length, 'buffers are detached by close()').toBe(0);
    throws(() => e.labels(), InvalidArgumentError, /closed/);
    await rejects(e.finishPass(), InvalidArgumentError, /closed/);
  });
});

describe('k-means++ input', () => {
  it('too few rows, short sample, NaN row', async () => {
    const e = await open();
    const s = normalData(50, 4, 5);
    await rejects(e.initKmeansPlusPlus(s, 2, 1), InvalidArgumentError, /needs at least k=3 sample rows, got 2/);
    await rejects(e.initKmeansPlusPlus(s, 60, 1), InvalidArgumentError, /the sample has 800 bytes, sampleRows=60/);
    s[10 * 4 + 1] = Infinity;
    const err = await rejects(e.initKmeansPlusPlus(s, 50, 1), NonFiniteInputError, /sample row 10/);
    expect((err as NonFiniteInputError).row).toBe(10);
  });
});
