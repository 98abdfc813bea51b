/**
 * The pod's cache file filled from the memory cache beside the job (worker/dataset/cache-filler.ts), on a real
 * directory: the file appears whole, under its final name, with the dataset's bytes, once every block has landed; a
 * job that ends first leaves nothing; a dataset over the cap is not written; a later job then reads the file.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CachedRowSource, cacheFileName } from '../../worker/dataset/cache.js';
import { fillCacheFromMemory } from '../../worker/dataset/cache-filler.js';
import { MemoryCachedRowSource } from '../../worker/dataset/memory-cache.js';
import { MemoryRowSource } from '../helpers/memory-row-source.js';

describe('filling the cache file from the memory cache', () => {
  let dir: string;
  beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'kmfleet-cache-fill-')); });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('writes every block as it lands; the file appears whole under its name and serves a later job', async () => {
    const src = new MemoryRowSource('s3://d/fill.npy', 10_007, 5, '"v1"', 1);
    const memory = new MemoryCachedRowSource(src, { blockBytes: 4096, concurrency: 3 });  // 51 blocks, the last short
    // one block in before the filler follows: it must be written too
    const head = Buffer.alloc(20 * src.rowBytes);
    await memory.read(0, 20, head);
    const errors: unknown[] = [];
    const path = await fillCacheFromMemory(memory, src, dir, { onError: (e) => errors.push(e) });
    expect(path).toBe(join(dir, cacheFileName(src.uri, src.etag)));
    memory.prefetch();
    const all = Buffer.alloc(src.rows * src.rowBytes);
    await memory.read(0, src.rows, all);
    await memory.close();  // waits for the writes and the rename
    expect(errors).toEqual([]);
    expect(readdirSync(dir)).toEqual([cacheFileName(src.uri, src.etag)]);
    expect(readFileSync(path!).equals(src.bytes)).toBe(true);

    // a later job on the pod: the complete file, no reads of the source
    const later = new MemoryRowSource('s3://d/fill.npy', 10_007, 5, '"v1"');
    const warm = await CachedRowSource.openComplete(later, dir);
    expect(warm).toBeInstanceOf(CachedRowSource);
    const got = Buffer.alloc(100 * later.rowBytes);
    await warm!.read(9_907, 100, got);
    expect(got.equals(src.bytes.subarray(9_907 * src.rowBytes))).toBe(true);
    expect(later.reads).toBe(0);
    await warm!.close();
    // another version of the object (another ETag) is not served from it
    expect(await CachedRowSource.openComplete(new MemoryRowSource('s3://d/fill.npy', 10_007, 5, '"v2"'), dir)).toBeUndefined();
  });

  it('a job that ends before every block landed leaves no file, partial or whole', async () => {
    const src = new MemoryRowSource('s3://d/slow.npy', 20_000, 4, '"e"', 20);
    const memory = new MemoryCachedRowSource(src, { blockBytes: 8192, concurrency: 2 });
    await fillCacheFromMemory(memory, src, dir);
    memory.prefetch();
    await memory.read(0, 10, Buffer.alloc(10 * src.rowBytes));
    await memory.close();
    expect(readdirSync(dir)).toEqual([]);
  });

  it('a dataset over the cap is not written, and says so', async () => {
    const src = new MemoryRowSource('s3://d/big.npy', 1000);  // 16,000 bytes
    const memory = new MemoryCachedRowSource(src, { blockBytes: 4096 });
    const errors: string[] = [];
    expect(await fillCacheFromMemory(memory, src, dir, { maxBytes: 10_000, onError: (e) => errors.push(String(e)) })).toBeUndefined();
    memory.prefetch();
    await memory.read(0, src.rows, Buffer.alloc(src.rows * src.rowBytes));
    await memory.close();
    expect(errors[0]).toMatch(/the dataset's 16000 bytes do not fit the cache's 10000/);
    expect(readdirSync(dir)).toEqual([]);
  });
});
