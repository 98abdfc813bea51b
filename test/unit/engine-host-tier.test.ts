/**
 * The engine's tiers (native/src/host_tier.h): rows resident in the backend, rows in the engine's host tier, rows fed
 * by the caller on every pass. Whatever the split, the results are bitwise those of one tier alone, a pass after the
 * first reads from the source only the rows past the held ones, and the plan and pass results say where rows came from.
 * test/gpu/engine-host-tier-cuda.test.ts runs this file on a CUDA engine.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, InvalidArgumentError, type EngineOptions } from '../../native/index.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import type { RowSource } from '../../core/dataset/row-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { runKmeans, type KmeansSpec } from '../../core/kmeans/index.js';

const backend = process.env.KMFLEET_TEST_BACKEND === 'cuda' ? 'cuda' : 'cpu';
const dir = mkdtempSync(join(tmpdir(), 'kmfleet-tier-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
// 10 chunks of 1,000 rows and a short last one
const N = 10_333, D = 24, K = 9, CHUNK = 1_000;
let f32: string, f16: string;
beforeAll(async () => {
  f32 = (await generateDataset(join(dir, 'a.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 7, clusterStd: 5 })).path;
  f16 = (await generateDataset(join(dir, 'h.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 7, clusterStd: 5, dtype: 'f16' })).path;
});

/** A source that counts the rows read from it, per pass (the driver's reads of the init sample come first). */
class CountingSource implements RowSource {
  reads: number[] = [];
  constructor(private readonly inner: RowSource) {}
  get rows() { return this.inner.rows; }
  get dims() { return this.inner.dims; }
  get dtype() { return this.inner.dtype; }
  get rowBytes() { return this.inner.rowBytes; }
  describe() { return this.inner.describe(); }
  async read(firstRow: number, count: number, target: Buffer) {
    this.reads.push(count);
    return this.inner.read(firstRow, count, target);
  }
  close() { return this.inner.close(); }
}

const spec = (over: Partial<KmeansSpec> = {}): KmeansSpec => ({ k: K, metric: 'l2', init: 'random', maxIter: 12, tol: 0, tolReassign: 0, seed: 3, ...over });
const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** device bytes of `rows` resident rows: the CPU backend keeps an fp32 row and its fp64 norm */
const residentBytes = (rows: number) => (backend === 'cpu' ? rows * (D * 4 + 8) : 0);

async function fit(path: string, s: KmeansSpec, engine: Partial<EngineOptions>) {
  const source = new CountingSource(await LocalFileSource.open(path));
  const e = await Engine.open({ rows: source.rows, dims: source.dims, k: s.k, metric: s.metric, dtype: source.dtype, backend, threads: backend === 'cpu' ? 2 : undefined, chunkRows: CHUNK, ...engine });
  try {
    const result = await runKmeans({ engine: e, source, spec: s });
    return { result, labels: e.labels(), plan: e.plan, reads: source.reads };
  } finally {
    e.close();
    await source.close();
  }
}

describe(`the engine's tiers (${backend})`, () => {
  it('gives the same bits whether rows are resident, in the host tier or fed, and reads only the fed rows again', async () => {
    for (const [path, s] of [[() => f32, spec()], [() => f16, spec()], [() => f32, spec({ metric: 'cosine', init: 'kmeans++' })]] as const) {
      const rowBytes = D * (path() === f16 ? 2 : 4);
      // every row fed on every pass: the reference
      const fed = await fit(path(), s, { memoryBudget: 0, hostMemoryBudget: 0 });
      expect(fed.plan.residentRows).toBe(0);
      expect(fed.plan.hostRows).toBe(0);
      const runs = {
        // host tier only: 4 whole chunks, the rest fed
        host: await fit(path(), s, { memoryBudget: 0, hostMemoryBudget: 4 * CHUNK * rowBytes + 17 }),
        // all of it in the host tier (the last chunk short)
        allHost: await fit(path(), s, { memoryBudget: 0, hostMemoryBudget: N * rowBytes }),
      } as Record<string, Awaited<ReturnType<typeof fit>>>;
      if (backend === 'cpu') {
        // all three tiers, the resident rows ending mid-chunk: 2,500 resident, 3,000 in the host tier, the rest fed
        runs.three = await fit(path(), s, { memoryBudget: residentBytes(2.5 * CHUNK), hostMemoryBudget: 3 * CHUNK * rowBytes });
        expect(runs.three.plan.residentRows).toBe(2.5 * CHUNK);
        expect(runs.three.plan.hostRows).toBe(3 * CHUNK);
      }
      expect(runs.host.plan.hostRows).toBe(4 * CHUNK);
      expect(runs.allHost.plan.hostRows).toBe(N);
      for (const [name, run] of Object.entries(runs)) {
        expect(bytes(run.result.centroids).equals(bytes(fed.result.centroids)), name).toBe(true);
        expect(run.result.history.map(({ ms, settledFraction, ...h }) => h), name).toEqual(fed.result.history.map(({ ms, settledFraction, ...h }) => h));
        expect(run.result.inertia, name).toBe(fed.result.inertia);
        expect(bytes(run.labels).equals(bytes(fed.labels)), name).toBe(true);
      }
      // the rows read through the source: every row on the first pass, then only the rows nobody holds (the init's
      // reads are the same in every run)
      const passes = fed.result.iterations + 1;
      expect(passes).toBeGreaterThan(3);
      const total = (r: number[]) => r.reduce((a, b) => a + b, 0);
      const held = { host: 4 * CHUNK, allHost: N, three: 5.5 * CHUNK } as Record<string, number>;
      for (const [name, run] of Object.entries(runs)) {
        expect(total(fed.reads) - total(run.reads), name).toBe((passes - 1) * held[name]);
      }
    }
  });

  it('says where the rows of a pass came from', async () => {
    const source = await LocalFileSource.open(f32);
    const rowBytes = D * 4;
    const e = await Engine.open({ rows: N, dims: D, k: K, metric: 'l2', dtype: 'f32', backend, threads: backend === 'cpu' ? 2 : undefined, chunkRows: CHUNK, memoryBudget: 0, hostMemoryBudget: 6 * CHUNK * rowBytes });
    try {
      const r = await runKmeans({ engine: e, source, spec: spec({ maxIter: 3 }) });
      expect(r.iterations).toBe(3);
      expect(e.plan.hostRows).toBe(6 * CHUNK);
      // straight through the engine: a pass after the first feeds only the rows past the host tier
      e.beginPass('assign', { firstRow: 6 * CHUNK });
      for (let first = 6 * CHUNK, b = 0; first < N; first += CHUNK, b = (b + 1) % e.plan.buffers) {
        const count = Math.min(CHUNK, N - first);
        await source.read(first, count, e.buffer(b));
        await e.feed(b, first, count);
      }
      const pass = await e.finishPass();
      expect(pass.rowsFrom).toEqual({ resident: 0, host: 6 * CHUNK, fed: N - 6 * CHUNK });
      expect(pass.heldRows).toBe(6 * CHUNK);
      expect(pass.hostRowsHeld).toBe(6 * CHUNK);
      expect(pass.hostTierWarning).toBeUndefined();
      // a feed that skips the host tier's rows is out of sequence, and says which rows the engine holds
      e.beginPass('assign');
      const count = Math.min(CHUNK, N - 7 * CHUNK);
      await source.read(7 * CHUNK, count, e.buffer(0));
      await expect(e.feed(0, 7 * CHUNK, count)).rejects.toThrow(/expected firstRow 6000.*holds rows \[0, 6000\)/);
      await expect(e.feed(0, 7 * CHUNK, count)).rejects.toBeInstanceOf(InvalidArgumentError);
    } finally {
      e.close();
      await source.close();
    }
  });

  it('refuses a negative host budget with a message that names it', async () => {
    await expect(Engine.open({ rows: N, dims: D, k: K, metric: 'l2', dtype: 'f32', backend, hostMemoryBudget: -5 })).rejects.toThrow(/hostMemoryBudget must be >= 0, got -5/);
  });
});
