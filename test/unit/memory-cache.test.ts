/**
 * The memory cache over a local file (no S3 needed for its scheduling and views): prefetched blocks at a limited
 * concurrency, views without a copy, and an init sample gathered from views equal to one gathered from the file.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { MemoryCachedRowSource } from '../../worker/dataset/memory-cache.js';
import type { RowSource } from '../../core/dataset/row-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { distinctIndices, Rng } from '../../core/kmeans/prng.js';
import { gatherRows } from '../../core/kmeans/row-gather.js';

const ROWS = 50_000;
const DIMS = 12;

/** counts reads in flight on the inner source */
class Counting implements RowSource {
  inFlight = 0;
  maxInFlight = 0;
  reads = 0;
  constructor(private readonly s: RowSource) {}
  get rows() { return this.s.rows; }
  get dims() { return this.s.dims; }
  get dtype() { return this.s.dtype; }
  get rowBytes() { return this.s.rowBytes; }
  describe() { return this.s.describe(); }
  async read(first: number, count: number, target: Buffer) {
    this.reads++;
    this.maxInFlight = Math.max(this.maxInFlight, ++this.inFlight);
    try {
      await new Promise((r) => setTimeout(r, 2));
      await this.s.read(first, count, target);
    } finally {
      this.inFlight--;
    }
  }
  close() { return this.s.close(); }
}

describe('MemoryCachedRowSource', () => {
  let dir: string;
  let path: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-memcache-'));
    path = (await generateDataset(join(dir, 'm.npy'), { kind: 'normal', rows: ROWS, dims: DIMS, seed: 5 })).path;
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('downloads each block once, at most `concurrency` at a time, and views equal the file', async () => {
    const file = await LocalFileSource.open(path);
    const inner = new Counting(await LocalFileSource.open(path));
    const mem = new MemoryCachedRowSource(inner, { blockBytes: 20 * file.rowBytes * 100, concurrency: 3 });
    mem.prefetch();
    const blocks = Math.ceil(ROWS / 2000);
    const want = Buffer.alloc(7000 * file.rowBytes);
    await file.read(12_345, 7000, want);
    expect((await mem.view(12_345, 7000)).equals(want)).toBe(true);
    const all = Buffer.alloc(ROWS * file.rowBytes);
    await mem.read(0, ROWS, all);
    const ref = Buffer.alloc(ROWS * file.rowBytes);
    await file.read(0, ROWS, ref);
    expect(all.equals(ref)).toBe(true);
    expect(inner.reads).toBe(blocks);
    expect(inner.maxInFlight).toBe(3);
    await mem.close();
    await expect(mem.view(0, 1)).rejects.toThrow(/after close/);
    await file.close();
  });

  it('serves the first rows of a block while the rest of it is still arriving (sources that report progress)', async () => {
    const file = await LocalFileSource.open(path);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // a file read that lands in two halves, reporting the first as an S3 GET does, and holds the second until released
    const halves: RowSource = {
      rows: file.rows, dims: file.dims, dtype: file.dtype, rowBytes: file.rowBytes,
      describe: () => file.describe(),
      async read(first, count, target, hint) {
        const half = Math.floor(count / 2);
        await file.read(first, half, target);
        hint?.onProgress?.(half * file.rowBytes);
        await gate;
        await file.read(first + half, count - half, target.subarray(half * file.rowBytes));
        hint?.onProgress?.(count * file.rowBytes);
      },
      close: async () => {},
    };
    const mem = new MemoryCachedRowSource(halves, { blockBytes: 10_000 * file.rowBytes, concurrency: 2 });
    const ref = Buffer.alloc(10_000 * file.rowBytes);
    await file.read(0, 10_000, ref);
    // rows 100..4999 are in the first half of block 0: served with the second half held back
    expect((await mem.view(100, 4900)).equals(ref.subarray(100 * file.rowBytes, 5000 * file.rowBytes))).toBe(true);
    let late = false;
    const rest = mem.view(4000, 2000).then((v) => ((late = true), v));
    await new Promise((r) => setTimeout(r, 20));
    expect(late).toBe(false);
    release();
    expect((await rest).equals(ref.subarray(4000 * file.rowBytes, 6000 * file.rowBytes))).toBe(true);
    await mem.close();
    await file.close();
  });

  it('an init sample gathered through views equals one gathered from the file', async () => {
    const file = await LocalFileSource.open(path);
    const mem = new MemoryCachedRowSource(await LocalFileSource.open(path), { blockBytes: 1 << 16, concurrency: 2 });
    mem.prefetch();
    const idx = Float64Array.from(distinctIndices(new Rng(3, 2), ROWS, 4096)).sort();
    const a = Buffer.alloc(idx.length * file.rowBytes);
    const b = Buffer.alloc(idx.length * file.rowBytes);
    await gatherRows(file, idx, a);
    await gatherRows(mem, idx, b);
    expect(b.equals(a)).toBe(true);
    await mem.close();
    await file.close();
  });
});
