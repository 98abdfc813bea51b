// The CUDA backend's behaviour beyond exactness: low precisions, agreement with the CPU backend, bitwise
// reproducibility (streamed vs resident, run to run), cancel, typed errors.
import { describe, expect, it } from 'vitest';

import {
  CancelledError, type CudaOptions, Engine, InvalidArgumentError, NonFiniteInputError, OutOfMemoryError, type PassResult, type Precision,
} from '../../native/index.js';
import { blobData, bytesOf, fromF16, isTie, assign, normalData, pickRows, runPass, toF16 } from '../helpers/reference.js';
import { distinctRows, engineTracker, fit } from './gpu-helpers.js';

const open = engineTracker();

function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

describe('low precisions: inertia within 0.1% of fp32 from the same init', () => {
  const cases = [
    { name: 'blobs D=64 K=50', x: blobData(20000, 64, 50, 31), d: 64, k: 50 },
    { name: 'normal D=32 K=100', x: normalData(20000, 32, 32), d: 32, k: 100 },
  ];
  for (const c of cases) {
    it(c.name, async () => {
      const n = 20000;
      const init = pickRows(c.x, c.d, distinctRows(n, c.k, 5));
      const inertia: Record<string, number> = {};
      for (const precision of ['fp32', 'tf32', 'bf16', 'fp16'] as Precision[]) {
        const e = await open({ rows: n, dims: c.d, k: c.k, precision, chunkRows: 8192 });
        expect(e.plan.precision).toBe(precision);
        e.setCentroids(init);
        const r = await fit(e, bytesOf(c.x), n, 6);
        inertia[precision] = r[r.length - 1].inertia;
      }
      for (const p of ['tf32', 'bf16', 'fp16']) {
        expect(Math.abs(inertia[p] / inertia.fp32 - 1), `${p}: ${inertia[p]} vs fp32 ${inertia.fp32}`).toBeLessThan(1e-3);
      }
    });
  }
  it('f16 data defaults to fp16 products', async () => {
    const e = await open({ rows: 1000, dims: 8, k: 4, dtype: 'f16' });
    expect(e.plan.precision).toBe('fp16');
    const f = await open({ rows: 1000, dims: 8, k: 4, dtype: 'f32' });
    expect(f.plan.precision).toBe('fp32');
  });
});

describe('CUDA fp32 vs the CPU backend', () => {
  it('same labels (except ties) and centroids within 1e-6 over 4 passes', async () => {
    const n = 20000, d = 40, k = 100;
    const x = blobData(n, d, 60, 41, 5, 1);
    const init = pickRows(x, d, distinctRows(n, k, 9));
    const g = await open({ rows: n, dims: d, k, chunkRows: 4096 });
    const c = await Engine.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 4096 });
    try {
      g.setCentroids(init);
      c.setCentroids(init);
      for (let p = 0; p < 4; p++) {
        const before = g.centroids();
        const rg = await runPass<PassResult>(g, bytesOf(x), n, 'fit', { skipBelow: p === 0 ? 0 : g.plan.residentRows });
        const rc = await runPass<PassResult>(c, bytesOf(x), n, 'fit', { skipBelow: p === 0 ? 0 : c.plan.residentRows });
        const lg = g.labels(), lc = c.labels();
        const ref = assign(Float64Array.from(x), n, d, before, k, 'l2');
        let bad = 0;
        for (let i = 0; i < n; i++) if (lg[i] !== lc[i] && !isTie(ref, i)) bad++;
        expect(bad, `pass ${p}`).toBe(0);
        expect(Math.abs(rg.inertia / rc.inertia - 1)).toBeLessThan(1e-9);
        const cg = g.centroids(), cc = c.centroids();
        for (let j = 0; j < cg.length; j++) {
          expect(Math.abs(cg[j] - cc[j]), `centroid value ${j}`).toBeLessThanOrEqual(1e-6 * Math.abs(cc[j]) + 1e-9);
        }
      }
    } finally {
      c.close();
    }
  });
});

describe('bitwise reproducibility', () => {
  const n = 60000, d = 32, k = 64, chunk = 4096;
  const x = blobData(n, d, 40, 51);
  const init = pickRows(x, d, distinctRows(n, k, 13));

  async function centroidsWith(memoryBudget: number | undefined): Promise<{ c: Float32Array; resident: number; labels: Int32Array }> {
    const e = await open({ rows: n, dims: d, k, chunkRows: chunk, ...(memoryBudget === undefined ? {} : { memoryBudget }) });
    e.setCentroids(init);
    await fit(e, bytesOf(x), n, 4);
    return { c: e.centroids(), resident: e.plan.residentRows, labels: e.labels() };
  }

  it('a small memory budget (partly streamed) gives the same centroids as fully resident', async () => {
    const full = await centroidsWith(undefined);
    expect(full.resident).toBe(n);
    const part = await centroidsWith(3 * chunk * 200); // ~2.4 MB: two chunks of 4096 rows at ~272 B/row
    const none = await centroidsWith(0);
    expect(part.resident).toBeGreaterThan(0);
    expect(part.resident).toBeLessThan(n);
    expect(part.resident % chunk).toBe(0);
    expect(none.resident).toBe(0);
    expect(sameBits(full.c, part.c)).toBe(true);
    expect(sameBits(full.c, none.c)).toBe(true);
    expect(Buffer.from(full.labels.buffer).equals(Buffer.from(none.labels.buffer))).toBe(true);
  });

  it('run to run (new engine, same input) bitwise identical', async () => {
    const a = await centroidsWith(undefined);
    const b = await centroidsWith(undefined);
    expect(sameBits(a.c, b.c)).toBe(true);
  });

  // exact sums (cuda/kernels/exact_sums.cuh): the fit passes' statistics are exact integers, so neither the chunk size nor the
  // resident split changes a bit of the centroids or the inertia
  it('any chunk size, resident or streamed, gives the same centroids and inertia', async () => {
    const runs: { c: Float32Array; inertia: number[]; chunk: number; resident: number }[] = [];
    for (const [chunkRows, memoryBudget] of [[4096, undefined], [1000, undefined], [n, undefined], [777, 0], [8192, 3 * 8192 * 200]] as const) {
      const e = await open({ rows: n, dims: d, k, chunkRows, ...(memoryBudget === undefined ? {} : { memoryBudget }) });
      e.setCentroids(init);
      const r = await fit(e, bytesOf(x), n, 5);
      runs.push({ c: e.centroids(), inertia: r.map((p) => p.inertia), chunk: e.plan.chunkRows, resident: e.plan.residentRows });
    }
    expect(runs.map((r) => r.chunk)).toEqual([4096, 1000, n, 777, 8192]);
    expect(runs.slice(0, 4).map((r) => r.resident)).toEqual([n, n, n, 0]);
    expect(runs[4].resident).toBeGreaterThan(0);  // partly resident: whole chunks, the rest streamed on every pass
    expect(runs[4].resident).toBeLessThan(n);
    for (const r of runs.slice(1)) {
      expect(sameBits(r.c, runs[0].c), `centroids, chunk ${r.chunk}`).toBe(true);
      expect(r.inertia, `inertia, chunk ${r.chunk}`).toEqual(runs[0].inertia);
    }
  });
});

describe('exact statistics', () => {
  it('inertia is exactly 0 where every row sits on its centroid (duplicates, K = distinct rows)', async () => {
    const k = 37, d = 24, n = 20_011;
    const distinct = blobData(k, d, 5, 91, 1e3);  // far from the origin: an fp64 Σ‖x‖² − ‖Σx‖²/n would not cancel to 0
    const x = new Float32Array(n * d);
    for (let i = 0; i < n; i++) x.set(distinct.subarray((i % k) * d, (i % k + 1) * d), i * d);
    for (const chunkRows of [4096, 999]) {
      const e = await open({ rows: n, dims: d, k, chunkRows });
      e.setCentroids(distinct);
      const r = await fit(e, bytesOf(x), n, 3);
      expect(r.map((p) => p.inertia)).toEqual([0, 0, 0]);
      expect(sameBits(e.centroids(), distinct)).toBe(true);
    }
  });

  // prepareRows checks every value as the statistics will see it (the exact sums hold |x| < 2^64): f32 and bf16 can
  // reach 2^64, f16 cannot; cosine rows are unit length by then. The lowest such row is named, whichever chunk or
  // stream found it, and the pass fails (nothing of it is taken).
  describe('values of magnitude 2^64 or more', () => {
    const n = 5000, d = 8, chunkRows = 1024;
    const below = 0x5f7fffff, at = 0x5f800000, atNeg = 0xdf800000;  // f32 bits: just below 2^64, 2^64, −2^64
    function f32Data(plants: [number, number][]): Float32Array {
      const x = normalData(n, d, 65);
      const bits = new Uint32Array(x.buffer, x.byteOffset, x.length);
      for (const [i, b] of plants) bits[i] = b;
      return x;
    }
    // bf16 is f32's upper half: the same plants as 16-bit patterns
    function bf16Bytes(x: Float32Array): Buffer {
      const bits = new Uint32Array(x.buffer, x.byteOffset, x.length);
      const out = Buffer.alloc(2 * x.length);
      for (let i = 0; i < x.length; i++) out.writeUInt16LE(bits[i] >>> 16, 2 * i);
      return out;
    }
    async function pass(x: Float32Array, opts: { dtype?: 'f32' | 'bf16'; metric?: 'l2' | 'cosine'; memoryBudget?: number }) {
      const e = await open({ rows: n, dims: d, k: 4, chunkRows, ...opts });
      e.setCentroids(pickRows(x, d, [0, 1, 2, 3]).map((v) => (Math.abs(v) > 1e6 ? 0 : v)));
      const bytes = opts.dtype === 'bf16' ? bf16Bytes(x) : bytesOf(x);
      return runPass<PassResult>(e, bytes, n, 'fit').catch((er: unknown) => er);
    }
    const named = (row: number) => new RegExp(`^row ${row} has a value of magnitude 2\\^64 or more`);

    it('f32: the lowest such row is named, resident or streamed; just below 2^64 is taken', async () => {
      const x = f32Data([[4021 * d + 2, atNeg], [300 * d + 7, at], [4999 * d, at]]);
      for (const memoryBudget of [undefined, 0]) {
        const err = await pass(x, { memoryBudget });
        expect(err, `budget ${memoryBudget}`).toBeInstanceOf(InvalidArgumentError);
        expect(String((err as Error).message)).toMatch(named(300));
      }
      const fine = await pass(f32Data([[12, below], [4021 * d + 2, below | 0x80000000]]), {});
      expect(fine).not.toBeInstanceOf(Error);
    });
    it('bf16 data: 2^64 is named, the largest bf16 below it is taken', async () => {
      const err = await pass(f32Data([[99 * d + 1, at], [3000 * d + 1, atNeg]]), { dtype: 'bf16' });
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(String((err as Error).message)).toMatch(named(99));
      expect(await pass(f32Data([[99 * d + 1, 0x5f7f0000]]), { dtype: 'bf16' })).not.toBeInstanceOf(Error);
    });
    it('a given centroid of 2^64 or more is named; the engine takes good ones after it', async () => {
      const x = normalData(n, d, 66);
      const e = await open({ rows: n, dims: d, k: 4, chunkRows });
      const c = pickRows(x, d, [0, 1, 2, 3]);
      c[2 * d + 5] = -(2 ** 64);
      e.setCentroids(c);
      const err = await runPass<PassResult>(e, bytesOf(x), n, 'fit').catch((er: unknown) => er);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(String((err as Error).message)).toMatch(/^centroid 2 has a value of magnitude 2\^64 or more/);
      // the failed pass is closed as any failed pass is: its finishPass rejects with the same error
      await expect(e.finishPass()).rejects.toThrow(/^centroid 2 has a value of magnitude 2\^64 or more/);
      c[2 * d + 5] = 1.5;
      e.setCentroids(c);
      const r = await runPass<PassResult>(e, bytesOf(x), n, 'fit');
      expect(Number.isFinite(r.inertia)).toBe(true);
    });
    it('cosine rows are unit length when summed: 2^64 and more is taken', async () => {
      expect(await pass(f32Data([[300 * d + 7, at], [17, 0x7e000000]]), { metric: 'cosine' })).not.toBeInstanceOf(Error);
    });
  });
});

// f16 data (l2) stays 16-bit on the device: sums, distances, the exact recheck and the re-seeding rows read the
// 16-bit rows. 16-bit → fp32 is exact, so everything must have the same bits as the same values given as f32 data
// (an fp32 job's backend keeps them as fp32; an fp16 job's engine rounds them to f16, exactly here), whether the rows
// are resident, partly streamed or streamed.
describe('f16 data read as 16-bit rows', () => {
  const n = 60000, d = 48, k = 64, chunk = 4096;
  const x32 = fromF16(toF16(blobData(n, d, 40, 71)));  // values that f16 holds exactly
  const h = toF16(x32);
  const rows = distinctRows(n, k, 17);
  rows[1] = rows[0];  // a duplicate centroid: one of the two ends up empty and is re-seeded with a farthest row
  const init = pickRows(x32, d, rows);

  async function run(dtype: 'f16' | 'f32', precision: Precision, memoryBudget: number | undefined) {
    const e = await open({ rows: n, dims: d, k, dtype, precision, chunkRows: chunk, ...(memoryBudget === undefined ? {} : { memoryBudget }) });
    e.setCentroids(init);
    const r = await fit(e, bytesOf(dtype === 'f16' ? h : x32), n, 4);
    return {
      c: e.centroids(), labels: e.labels(), resident: e.plan.residentRows,
      inertia: r.map((p) => p.inertia), reseeded: r.reduce((a, p) => a + p.emptyReseeded, 0),
    };
  }

  for (const precision of ['fp16', 'fp32'] as Precision[]) {
    it(`${precision}: the same bits as the values given as f32 data, resident, partly streamed or streamed`, async () => {
      const ref = await run('f32', precision, undefined);
      expect(ref.reseeded).toBeGreaterThan(0);
      const residents: number[] = [];
      for (const budget of [undefined, 3 * chunk * 200, 0]) {
        const r = await run('f16', precision, budget);
        residents.push(r.resident);
        expect(sameBits(r.c, ref.c), `centroids, budget ${budget}`).toBe(true);
        expect(Buffer.from(r.labels.buffer).equals(Buffer.from(ref.labels.buffer)), `labels, budget ${budget}`).toBe(true);
        expect(r.inertia, `inertia, budget ${budget}`).toEqual(ref.inertia);
        expect(r.reseeded).toBe(ref.reseeded);
      }
      expect(residents[0]).toBe(n);
      expect(residents[1]).toBeGreaterThan(0);
      expect(residents[1]).toBeLessThan(n);
      expect(residents[2]).toBe(0);
    });
  }
});

describe('cancel and typed errors', () => {
  it('cancel mid-pass rejects with CancelledError', async () => {
    const n = 200000, d = 64, k = 256;
    const x = normalData(n, d, 61);
    const e = await open({ rows: n, dims: d, k, chunkRows: 8192 });
    e.setCentroids(pickRows(x, d, distinctRows(n, k, 1)));
    const p = runPass<PassResult>(e, bytesOf(x), n, 'fit');
    setTimeout(() => e.cancel(), 5);
    await expect(p).rejects.toBeInstanceOf(CancelledError);
  });

  it('a non-finite value names its row', async () => {
    const n = 5000, d = 8;
    const x = normalData(n, d, 62);
    x[3217 * d + 5] = Number.NaN;
    const e = await open({ rows: n, dims: d, k: 4, chunkRows: 1024 });
    e.setCentroids(pickRows(x, d, [0, 1, 2, 3]));
    const err = await runPass<PassResult>(e, bytesOf(x), n, 'fit').catch((er: unknown) => er);
    expect(err).toBeInstanceOf(NonFiniteInputError);
    expect((err as NonFiniteInputError).row).toBe(3217);
  });

  it('cosine with a zero row is an invalid argument', async () => {
    const n = 3000, d = 8;
    const x = normalData(n, d, 63);
    x.fill(0, 1500 * d, 1501 * d);
    const e = await open({ rows: n, dims: d, k: 4, metric: 'cosine', chunkRows: 1024 });
    e.setCentroids(pickRows(x, d, [0, 1, 2, 3]));
    await expect(runPass<PassResult>(e, bytesOf(x), n, 'fit')).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('K×D that cannot fit is OutOfMemory with the numbers', async () => {
    const err = await Engine.open({ rows: 1_000_000, dims: 16384, k: 1_000_000, metric: 'l2', dtype: 'f32', backend: 'cuda' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OutOfMemoryError);
    expect(String((err as Error).message)).toMatch(/MiB/);
  });

  it('f16 data through fp32 exact mode keeps working after an error in another engine', async () => {
    const n = 4000, d = 16;
    const h = toF16(normalData(n, d, 64));
    const e = await open({ rows: n, dims: d, k: 8, dtype: 'f16', precision: 'fp32', chunkRows: 1000 });
    e.setCentroids(pickRows(normalData(n, d, 64), d, [0, 1, 2, 3, 4, 5, 6, 7]));
    const r = await runPass<PassResult>(e, bytesOf(h), n, 'fit');
    expect(r.counts.reduce((a, b) => a + b, 0)).toBe(n);
  });
});

describe('the plan names the assignment kernel', () => {
  // plan.device is "<card> (sm_XY, wgmma)" where the Hopper kernel takes the rows (this build has it, compute
  // capability 9.0, Dp ≤ 256, not cuda.assignKernel 'portable'), else "(sm_XY, mma.sync)". Tests that need the
  // Hopper kernel skip on that name, so a wrong name must fail here instead of skipping there: scripts/gpu-run says
  // which kernel its build runs on this device (KMFLEET_TEST_ASSIGN_KERNEL).
  it("names the kernel this build runs, and the portable one for Dp > 256 or with assignKernel 'portable'", async () => {
    const e = await open({ rows: 1000, dims: 64, k: 8 });
    expect(e.plan.device).toMatch(/ \(sm_\d+, (wgmma|mma\.sync)\)$/);
    const expected = process.env.KMFLEET_TEST_ASSIGN_KERNEL;
    if (expected) expect(e.plan.device).toContain(`, ${expected})`);
    const wide = await open({ rows: 1000, dims: 300, k: 8 });
    expect(wide.plan.device).toMatch(/, mma\.sync\)$/);
    const forced = await open({ rows: 1000, dims: 64, k: 8, cuda: { assignKernel: 'portable' } });
    expect(forced.plan.device).toMatch(/, mma\.sync\)$/);
  });
});

describe("backend 'auto'", () => {
  // The cost model (native/src/cost_model.h): a small problem stays on the CPU (a CUDA context alone costs more than
  // the whole fit), a large one goes to the GPU. Opening an engine plans without touching any data.
  it('keeps a small problem on the CPU and sends a large one to the GPU', async () => {
    const small = await open({ rows: 10_000, dims: 16, k: 8, backend: 'auto' });
    expect(small.plan.backend).toBe('cpu');
    const large = await open({ rows: 4_000_000, dims: 128, k: 1024, backend: 'auto', memoryBudget: 0 });
    expect(large.plan.backend).toBe('cuda');
  });
});

describe('memory planner', () => {
  // Automatic chunks: 128 MiB of input rows, whether every row stays resident (the chunk boundaries still order the
  // sums' additions: small chunks make small segments) or rows stream on every pass (each streamed chunk has fixed
  // costs: cuda/planner.cpp); smaller only where memory is short. Opening plans only.
  it('takes 128 MiB chunks, resident or streamed, and keeps a given chunk size', async () => {
    const rows = 4_000_000, dims = 32;  // 128 B a row: 128 MiB = 1,048,576 rows
    const resident = await open({ rows, dims, k: 64 });
    expect(resident.plan.residentRows).toBe(rows);
    expect(resident.plan.chunkRows).toBe(1_048_576);
    const streamed = await open({ rows, dims, k: 64, memoryBudget: 0 });
    expect(streamed.plan.residentRows).toBe(0);
    expect(streamed.plan.chunkRows).toBe(1_048_576);
    const half = await open({ rows, dims, k: 64, memoryBudget: 600 << 20 });  // ~1.5M rows of 408 B fit: one chunk
    expect(half.plan.chunkRows).toBe(1_048_576);
    expect(half.plan.residentRows).toBe(1_048_576);  // whole chunks: a chunk is resident or streamed
    const given = await open({ rows, dims, k: 64, memoryBudget: 0, chunkRows: 100_000 });
    expect(given.plan.chunkRows).toBe(100_000);  // a given chunk size is kept
  });

  it('keeps within a device memory cap, and names the smallest cap that works when it is too small', async () => {
    const rows = 4_000_000, dims = 32, k = 64;
    const err = await open({ rows, dims, k, deviceMemory: 8 << 20 }).then(() => undefined, (e: Error) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    const m = /device memory budget of 8\.0 MiB is too small for K×D = 64×32: .* the smallest budget that works is (\d+) MiB \(chunks of 1024 rows\)/.exec(err!.message);
    expect(m, err!.message).not.toBeNull();
    // that cap opens, with no row kept on the device
    const least = await open({ rows, dims, k, deviceMemory: Number(m![1]) << 20 });
    expect(least.plan.residentRows).toBe(0);
    // a cap between keeps some rows, fewer than without it; all of them in a cap as large as the device
    const capped = await open({ rows, dims, k, deviceMemory: 2 * 2 ** 30 });
    expect(capped.plan.residentRows).toBeGreaterThan(0);
    expect(capped.plan.residentRows).toBeLessThan(rows);
    expect((await open({ rows, dims, k, deviceMemory: 2 ** 50 })).plan.residentRows).toBe(rows);
  });

  it('pins three host buffers, never more than the dataset has chunks, and keeps a given count', async () => {
    const dims = 32;  // 128 MiB chunks of 1,048,576 rows
    expect((await open({ rows: 4_000_000, dims, k: 64 })).plan.buffers).toBe(3);
    expect((await open({ rows: 1_500_000, dims, k: 64 })).plan.buffers).toBe(2);
    expect((await open({ rows: 1_000_000, dims, k: 64 })).plan.buffers).toBe(1);
    expect((await open({ rows: 1_000_000, dims, k: 64, chunkRows: 100_000 })).plan.buffers).toBe(3);
    expect((await open({ rows: 1_000_000, dims, k: 64, buffers: 4 })).plan.buffers).toBe(4);
  });
});

// A partly resident pass computes its streamed chunks while the resident rows are (their own stream, sums into
// per-chunk partials folded after the resident rows in chunk order). Other slot counts and queue depths
// (CudaOptions slots, residentAhead) must give the same bits, with the resident rows chunk by chunk (small budget)
// and in one go (budget with room for the one-go scratch), and equal the fully streamed run.
describe('overlapped streamed chunks', () => {
  const n = 60000, d = 32, k = 64, chunk = 4096;
  const x = blobData(n, d, 40, 53);
  const init = pickRows(x, d, distinctRows(n, k, 19));

  // cuda: the schedule of a partly resident pass and the number of chunk slots (planner.cpp, resident_pass.cu)
  async function run(memoryBudget: number, cuda: CudaOptions = {}) {
    const e = await open({ rows: n, dims: d, k, chunkRows: chunk, memoryBudget, cuda });
    e.setCentroids(init);
    const passes = await fit(e, bytesOf(x), n, 4);
    await runPass(e, bytesOf(x), n, 'assign', { distances: true, skipBelow: e.plan.residentRows });
    return { c: e.centroids(), labels: e.labels(), dist: e.distances(), resident: e.plan.residentRows,
      inertia: passes.map((p) => p.inertia) };
  }

  it('the same centroids, labels, distances and inertia whatever the schedule, the slots, and as fully streamed', async () => {
    const none = await run(0);
    expect(none.resident).toBe(0);
    const schedules: CudaOptions[] = [
      {},                                   // the planner's slots, two resident steps ahead
      { slots: 2 },
      { slots: 7, residentAhead: 1 },
    ];
    const streamed2 = await run(0, { slots: 2 });
    expect(sameBits(streamed2.c, none.c), 'fully streamed, 2 slots: centroids').toBe(true);
    for (const budget of [3 * chunk * 200, 8 * chunk * 300 + (4 << 20)]) {
      for (const cuda of schedules) {
        const r = await run(budget, cuda);
        const what = `budget ${budget} ${JSON.stringify(cuda)}`;
        expect(r.resident, what).toBeGreaterThanOrEqual(chunk);
        expect(r.resident, what).toBeLessThan(n);
        expect(sameBits(r.c, none.c), `${what} centroids`).toBe(true);
        expect(Buffer.from(r.labels.buffer).equals(Buffer.from(none.labels.buffer)), `${what} labels`).toBe(true);
        expect(sameBits(r.dist, none.dist), `${what} distances`).toBe(true);
        expect(r.inertia, what).toEqual(none.inertia);
      }
    }
  });
});
