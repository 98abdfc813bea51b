/**
 * ResidentPreload (worker/dataset/resident-preload.ts) over the real memory cache (on a local file) and the real
 * engine: the cache tells its listeners every row as blocks land, the preload hands each row below the engine's
 * resident budget over exactly once, finish() says where the first pass starts, and the run from there equals the run
 * fed from row 0. The cache's close() waits for work that still reads its buffer.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, type PassResult } from '../../native/index.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { MemoryCachedRowSource } from '../../worker/dataset/memory-cache.js';
import { ResidentPreload } from '../../worker/dataset/resident-preload.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { runPass } from '../../core/kmeans/pass-runner.js';

const ROWS = 40_000, DIMS = 8, K = 6;

describe('ResidentPreload', () => {
  let dir: string;
  let path: string;
  const engines: Engine[] = [];
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-preload-unit-'));
    path = (await generateDataset(join(dir, 'p.npy'), { kind: 'blobs', rows: ROWS, dims: DIMS, centers: K, seed: 2, clusterStd: 2 })).path;
  });
  afterAll(() => {
    engines.forEach((e) => e.close());
    rmSync(dir, { recursive: true, force: true });
  });

  const open = async (memoryBudget?: number) => {
    const e = await Engine.open({ rows: ROWS, dims: DIMS, k: K, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 3000, threads: 2, memoryBudget });
    engines.push(e);
    return e;
  };
  const cache = async (blockRows: number) =>
    new MemoryCachedRowSource(await LocalFileSource.open(path), { blockBytes: blockRows * DIMS * 4, concurrency: 3 });

  it('the cache reports every row as its block lands; a late listener gets what is already in place', async () => {
    const mem = await cache(7_000);
    const seen = new Map<number, number>();
    const done = new Set<number>();
    mem.onRowsArrived((first, count, blockDone) => {
      seen.set(first, Math.max(seen.get(first) ?? 0, count));
      if (blockDone) done.add(first);
    });
    mem.prefetch();
    await mem.view(0, ROWS);
    expect([...done].sort((a, b) => a - b)).toEqual([0, 7_000, 14_000, 21_000, 28_000, 35_000]);
    expect([...seen.values()].reduce((a, b) => a + b, 0)).toBe(ROWS);
    const late: [number, number, boolean][] = [];
    mem.onRowsArrived((first, count, blockDone) => late.push([first, count, blockDone]))();
    expect(late).toEqual([0, 7_000, 14_000, 21_000, 28_000, 35_000].map((f) => [f, Math.min(7_000, ROWS - f), true]));
    const file = readFileSync(path);
    const offset = file.length - ROWS * DIMS * 4;
    expect(mem.rowsInPlace(123, 10).equals(file.subarray(offset + 123 * 32, offset + 133 * 32))).toBe(true);
    await mem.close();
  });

  it('hands each resident row over once; the first pass from finish() equals a pass fed from row 0', async () => {
    const init = new Float32Array(K * DIMS).map((_, i) => (i % 7) - 3);
    const plainEngine = await open();
    const plainSource = await LocalFileSource.open(path);
    plainEngine.setCentroids(init);
    const plain: PassResult[] = [];
    for (let p = 0; p < 3; p++) plain.push(await runPass(plainEngine, plainSource, 'fit'));
    await plainSource.close();

    for (const budget of [undefined, 15_000 * (DIMS * 4 + 8)]) {
      const e = await open(budget);
      const mem = await cache(4_000);
      const sent: [number, number][] = [];
      const loadRows = e.loadRows.bind(e);
      e.loadRows = (rows, first, count) => {
        sent.push([first, count]);
        return loadRows(rows, first, count);
      };
      const preload = ResidentPreload.start(e, mem, { minBytes: 1 })!;
      expect(preload).toBeDefined();
      mem.prefetch();
      await mem.view(0, ROWS);
      const held = await preload.finish();
      const resident = e.plan.residentRows;
      expect(held).toBe(resident);
      // every row below the budget exactly once, none above it
      const rows = sent.flatMap(([f, c]) => Array.from({ length: c }, (_, i) => f + i)).sort((a, b) => a - b);
      expect(rows).toEqual(Array.from({ length: resident }, (_, i) => i));
      e.setCentroids(init);
      const results: PassResult[] = [];
      results.push(await runPass(e, mem, 'fit', { firstRow: held }));
      for (let p = 1; p < 3; p++) results.push(await runPass(e, mem, 'fit'));
      results.forEach((r, i) => {
        expect(r.inertia, `budget ${budget}: pass ${i}`).toBe(plain[i].inertia);
        expect(r.reassigned).toBe(plain[i].reassigned);
        expect(r.shift).toBe(plain[i].shift);
      });
      expect(Buffer.from(e.centroids().buffer).equals(Buffer.from(plainEngine.centroids().buffer))).toBe(true);
      await mem.close();
    }
  });

  it('off when the engine keeps nothing resident', async () => {
    const mem = await cache(4_000);
    expect(ResidentPreload.start(await open(0), mem)).toBeUndefined();
    await mem.close();
  });

  it("the cache's close() waits for work lent its buffer", async () => {
    const mem = await cache(4_000);
    mem.prefetch();
    await mem.view(0, ROWS);
    let release!: () => void;
    let released = false;
    mem.lend(new Promise<void>((r) => (release = r)).then(() => { released = true; }));
    let closed = false;
    const closing = mem.close().then(() => { closed = true; });
    await new Promise((r) => setTimeout(r, 30));
    expect(closed).toBe(false);
    release();
    await closing;
    expect(released).toBe(true);
  });
});
