/**
 * The dataset cache under a size cap (KMFLEET_CACHE_MAX_GB, worker/dataset/cache-eviction.ts), on a real directory:
 * the least recently used complete files make room for a new one, a read refreshes a file's place, other jobs'
 * partial files are counted and left alone (unless stale), and a dataset that cannot fit is read without a cache.
 * The inner source is in memory: what is under test is the directory, not S3 (test/integration/s3-source.test.ts
 * runs the cache against s3rver).
 */
import { mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeCacheRoom, STALE_PARTIAL_MS } from '../../worker/dataset/cache-eviction.js';
import { CachedRowSource, cacheFileName } from '../../worker/dataset/cache.js';
import { MemoryRowSource as MemorySource } from '../helpers/memory-row-source.js';

const ROW_BYTES = 4 * 4;  // MemorySource's default 4 float32 columns

/** Opens the cache over `src`, reads every row once (filling the file), closes; returns what onError/onEvict saw. */
async function useOnce(dir: string, src: MemorySource, maxBytes?: number) {
  const errors: string[] = [];
  const evicted: string[][] = [];
  const s = await CachedRowSource.open(src, dir, (e) => errors.push(String(e)), { maxBytes, onEvict: (p) => evicted.push(p) });
  const t = Buffer.alloc(src.rows * ROW_BYTES);
  await s.read(0, src.rows, t);
  await s.close();
  return { cached: s instanceof CachedRowSource, errors, evicted };
}

const fileOf = (dir: string, src: MemorySource) => join(dir, cacheFileName(src.uri, src.etag));
const age = (path: string, msAgo: number) => utimesSync(path, new Date(Date.now() - msAgo), new Date(Date.now() - msAgo));

describe('dataset cache under a size cap', () => {
  let dir: string;
  beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'kmfleet-cache-cap-')); });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('evicts the least recently used complete files to make room, and a read refreshes a file', async () => {
    const [a, b, c] = ['s3://d/a.npy', 's3://d/bb.npy', 's3://d/ccc.npy'].map((u) => new MemorySource(u, 1000));
    const cap = 2 * 1000 * ROW_BYTES + 100;  // two datasets fit
    await useOnce(dir, a, cap);
    await useOnce(dir, b, cap);
    age(fileOf(dir, a), 60_000);
    age(fileOf(dir, b), 30_000);
    // a is used again (a hit: no read of the source) and becomes the most recent; b is now the least recent
    const readsBefore = a.reads;
    expect((await useOnce(dir, a, cap)).evicted).toEqual([]);
    expect(a.reads).toBe(readsBefore);
    const third = await useOnce(dir, c, cap);
    expect(third).toMatchObject({ cached: true, errors: [] });
    expect(third.evicted).toEqual([[fileOf(dir, b)]]);
    expect(readdirSync(dir).sort()).toEqual([cacheFileName(a.uri, a.etag), cacheFileName(c.uri, c.etag)].sort());
    // what stays is whole and right: a hit serves the same bytes the source holds
    const s = await CachedRowSource.open(c, dir, () => {}, { maxBytes: cap });
    const got = Buffer.alloc(10 * ROW_BYTES), want = Buffer.alloc(10 * ROW_BYTES);
    await s.read(990, 10, got);
    await c.read(990, 10, want);
    expect(got.equals(want)).toBe(true);
    await s.close();
  });

  it('a dataset larger than the cap is read without a cache and evicts nothing', async () => {
    const small = new MemorySource('s3://d/small.npy', 100);
    await useOnce(dir, small, 10_000);
    const big = new MemorySource('s3://d/big.npy', 1000);  // 16,000 bytes
    const r = await useOnce(dir, big, 10_000);
    expect(r.cached).toBe(false);
    expect(r.errors[0]).toMatch(/the dataset's 16000 bytes do not fit the cache's 10000 \(KMFLEET_CACHE_MAX_GB\)$/);
    expect(r.evicted).toEqual([]);
    expect(readdirSync(dir)).toEqual([cacheFileName(small.uri, small.etag)]);
  });

  it("other jobs' partial files count and stay; a stale one (its writer died) goes", async () => {
    const filling = join(dir, `${cacheFileName('s3://d/other.npy', '"x"')}.123.abcd.partial`);
    writeFileSync(filling, Buffer.alloc(9000));
    const src = new MemorySource('s3://d/mine.npy', 500);  // 8,000 bytes: 9,000 + 8,000 > 12,000
    const r = await useOnce(dir, src, 12_000);
    expect(r.cached).toBe(false);
    expect(r.errors[0]).toMatch(/beside the 9000 bytes other jobs are filling$/);
    expect(readdirSync(dir)).toEqual([filling.slice(dir.length + 1)]);
    age(filling, STALE_PARTIAL_MS + 60_000);
    const again = await useOnce(dir, src, 12_000);
    expect(again).toMatchObject({ cached: true, evicted: [[filling]] });
    expect(readdirSync(dir)).toEqual([cacheFileName(src.uri, src.etag)]);
  });

  it('a file evicted by another job: before its open, a plain miss (no error); after it, still read whole', async () => {
    const src = new MemorySource('s3://d/gone.npy', 500, 4, '"g"');
    await useOnce(dir, src);
    // evicted before this job opens it: a miss like any other, nothing for the job's log to call an error
    rmSync(fileOf(dir, src));
    const errors: unknown[] = [];
    expect(await CachedRowSource.openComplete(src, dir, (e) => errors.push(e))).toBeUndefined();
    expect(errors).toEqual([]);
    // evicted after this job opened it: the open handle still reads every row, none from the source
    await useOnce(dir, src);
    const reads = src.reads;
    const warm = await CachedRowSource.openComplete(src, dir, (e) => errors.push(e));
    expect(warm).toBeInstanceOf(CachedRowSource);
    rmSync(fileOf(dir, src));
    const t = Buffer.alloc(src.rows * ROW_BYTES);
    await warm!.read(0, src.rows, t);
    await warm!.close();
    expect(t.equals(src.bytes)).toBe(true);
    expect(src.reads).toBe(reads);
    expect(errors).toEqual([]);
  });

  it('without a cap nothing is evicted', async () => {
    for (const u of ['s3://d/1.npy', 's3://d/22.npy', 's3://d/333.npy']) {
      expect((await useOnce(dir, new MemorySource(u, 1000))).evicted).toEqual([]);
    }
    expect(readdirSync(dir)).toHaveLength(3);
  });

  it('makeCacheRoom: oldest first until the new file fits, ties by name', async () => {
    for (const [name, bytes, ago] of [['a.rows', 4000, 3000], ['b.rows', 4000, 2000], ['c.rows', 4000, 1000]] as const) {
      writeFileSync(join(dir, name), Buffer.alloc(bytes));
      age(join(dir, name), ago);
    }
    writeFileSync(join(dir, 'unrelated.txt'), 'not a cache file');
    const room = await makeCacheRoom(dir, 5000, 12_000);
    expect(room).toEqual({ fits: true, evicted: [join(dir, 'a.rows'), join(dir, 'b.rows')], usedBytes: 4000, fillingBytes: 0 });
    expect(statSync(join(dir, 'unrelated.txt')).isFile()).toBe(true);
  });
});
