import { mkdtempSync, readdirSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CachedRowSource, MemoryCachedRowSource } from '../../worker/dataset/cache.js';
import { S3RowSource } from '../../worker/dataset/s3-source.js';
import { DatasetFormatError } from '../../core/formats/errors.js';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { createS3 } from '../../worker/s3/client.js';
import { S3ObjectChangedError, S3ObjectNotFoundError } from '../../worker/s3/errors.js';
import { delay, s3Error, startS3FaultProxy, truncate } from '../helpers/s3-fault-proxy.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';

const ROWS = 5000;
const DIMS = 7;
function matrix(rows = ROWS, dims = DIMS, seed = 1): Float32Array {
  const a = new Float32Array(rows * dims);
  let x = seed;
  for (let i = 0; i < a.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    a[i] = (x / 2 ** 32) * 10 - 5;
  }
  return a;
}

describe('S3RowSource against s3rver', () => {
  let s3: S3ServerHandle;
  let cacheDir: string;
  const data = matrix();
  const bytes = Buffer.from(data.buffer);
  beforeAll(async () => {
    s3 = await startS3Server({ buckets: ['data'] });
    cacheDir = mkdtempSync(join(tmpdir(), 'kmfleet-cache-'));
    await s3.put('data', 'x.npy', encodeNpy(data, [ROWS, DIMS]));
    await s3.put('data', 'x.f32', bytes);
  });
  afterAll(async () => {
    await s3?.stop();
    if (cacheDir) rmSync(cacheDir, { recursive: true, force: true });
  });

  it('opens an npy with ONE ranged GET (size and ETag from its answer), a raw file with one HEAD; a cut probe is retried', async () => {
    // S3 answers a range over an empty object with 416 (s3rver 3.7.1 drops the connection instead: the proxy answers)
    const invalidRange = () => s3Error(416, 'InvalidRange', 'The requested range is not satisfiable');
    const proxy = await startS3FaultProxy(s3, {
      fault: (r) => (r.n === 3 ? truncate(100) : r.method === 'GET' && r.key === 'empty.npy' ? invalidRange() : undefined),
    });
    const client = createS3({ ...proxy.settings, retry: { budgetMs: 10_000, attempts: 3, baseMs: 1, maxMs: 5 } });
    try {
      const ops = () => proxy.requests.map((r) => `${r.operation} ${r.headers.range ?? ''}`.trim());
      const npy = await S3RowSource.open(client, 's3://data/x.npy', { format: 'npy' });
      expect([npy.rows, npy.dims, npy.size]).toEqual([ROWS, DIMS, 128 + ROWS * DIMS * 4]);
      expect(npy.etag).toMatch(/^"[0-9a-f]{32}"$/);
      expect(ops()).toEqual(['GetObject bytes=0-65547']);
      const raw = await S3RowSource.open(client, 's3://data/x.f32', { format: 'f32', dims: DIMS });
      expect(raw.rows).toBe(ROWS);
      expect(ops().slice(1)).toEqual(['HeadObject']);
      // the 3rd request's body is cut after 100 bytes: the probe is asked again, whole
      const again = await S3RowSource.open(client, 's3://data/x.npy', { format: 'npy' });
      expect([again.rows, again.etag]).toEqual([ROWS, npy.etag]);
      expect(ops().slice(2)).toEqual(['GetObject bytes=0-65547', 'GetObject bytes=0-65547']);
      expect(proxy.requests[2].fault).toBe('truncate');
      // an object smaller than the probe, and an empty one (no byte to range over: answered by a HEAD)
      await s3.put('data', 'tiny.npy', encodeNpy(new Float32Array([1, 2, 3, 4]), [2, 2]));
      expect((await S3RowSource.open(client, 's3://data/tiny.npy', { format: 'npy' })).rows).toBe(2);
      await s3.handle.client.send(new PutObjectCommand({ Bucket: 'data', Key: 'empty.npy', Body: '', ContentLength: 0 }));
      await expect(S3RowSource.open(client, 's3://data/empty.npy', { format: 'npy' })).rejects.toThrow(/0 bytes: too short for a \.npy file/);
      await expect(S3RowSource.open(client, 's3://data/none.npy', { format: 'npy' })).rejects.toBeInstanceOf(S3ObjectNotFoundError);
    } finally {
      client.destroy();
      await proxy.stop();
    }
  });

  it('reads rows in many parallel parts into the target', async () => {
    const src = await S3RowSource.open(s3.handle, 's3://data/x.npy', { format: 'npy', partBytes: 1000, concurrency: 4 });
    expect([src.rows, src.dims, src.dtype, src.rowBytes]).toEqual([ROWS, DIMS, 'f32', DIMS * 4]);
    expect(src.stats.requests).toBe(0);
    expect(src.describe()).toMatch(/s3:\/\/data\/x\.npy \(npy <f4, 5000 × 7, ETag "/);
    const target = Buffer.alloc(1234 * src.rowBytes + 8);
    await src.read(100, 1234, target);
    expect(target.subarray(0, 1234 * src.rowBytes).equals(bytes.subarray(100 * DIMS * 4, 1334 * DIMS * 4))).toBe(true);
    expect(src.stats.requests).toBe(Math.ceil((1234 * DIMS * 4) / 1000));
    await expect(src.read(ROWS - 1, 2, target)).rejects.toThrow(RangeError);
    await src.close();
  });

  it('splits one large read into parallel parts of at least 4 MiB (and at most partBytes)', async () => {
    const big = Buffer.alloc(9 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4) big.writeUInt32LE(i, i);
    await s3.put('data', 'big.f32', big);
    const src = await S3RowSource.open(s3.handle, 's3://data/big.f32', { format: 'f32', dims: 256 });
    const t = Buffer.alloc(big.length);
    await src.read(0, src.rows, t);
    expect(t.equals(big)).toBe(true);
    expect(src.stats.requests).toBe(3);
    const capped = await S3RowSource.open(s3.handle, 's3://data/big.f32', { format: 'f32', dims: 256, partBytes: 1024 * 1024 });
    await capped.read(0, capped.rows, t);
    expect(capped.stats.requests).toBe(9);
  });

  it('reads raw f32 given dims; rejects a size that is not whole rows', async () => {
    const src = await S3RowSource.open(s3.handle, 's3://data/x.f32', { format: 'f32', dims: DIMS });
    expect(src.rows).toBe(ROWS);
    const t = Buffer.alloc(ROWS * DIMS * 4);
    await src.read(0, ROWS, t);
    expect(t.equals(bytes)).toBe(true);
    await expect(S3RowSource.open(s3.handle, 's3://data/x.f32', { format: 'f32', dims: 9 })).rejects.toThrow(/not a whole number of 9-dim rows/);
  });

  it('bad header, truncated data, wrong dims and a missing object fail clearly', async () => {
    await s3.put('data', 'bad.npy', Buffer.from('this is not an npy file at all'));
    await expect(S3RowSource.open(s3.handle, 's3://data/bad.npy', { format: 'npy' })).rejects.toThrow(DatasetFormatError);
    const full = encodeNpy(data, [ROWS, DIMS]);
    await s3.put('data', 'short.npy', full.subarray(0, full.length - 4));
    await expect(S3RowSource.open(s3.handle, 's3://data/short.npy', { format: 'npy' })).rejects.toThrow(/needs 140000 bytes of data/);
    await expect(S3RowSource.open(s3.handle, 's3://data/x.npy', { format: 'npy', dims: 8 })).rejects.toThrow(/has 7 dims/);
    await expect(S3RowSource.open(s3.handle, 's3://data/missing.npy', { format: 'npy' })).rejects.toBeInstanceOf(S3ObjectNotFoundError);
  });

  it('a dataset replaced mid-job fails the next read with S3ObjectChangedError', async () => {
    await s3.put('data', 'moving.npy', encodeNpy(data, [ROWS, DIMS]));
    const src = await S3RowSource.open(s3.handle, 's3://data/moving.npy', { format: 'npy' });
    await s3.put('data', 'moving.npy', encodeNpy(matrix(ROWS, DIMS, 2), [ROWS, DIMS]));
    await expect(src.read(0, 10, Buffer.alloc(10 * src.rowBytes))).rejects.toBeInstanceOf(S3ObjectChangedError);
  });

  it('the memory cache downloads each block once (prefetched), serves any range, and surfaces a changed object', async () => {
    const inner = await S3RowSource.open(s3.handle, 's3://data/x.npy', { format: 'npy' });
    const mem = new MemoryCachedRowSource(inner, { blockBytes: 10_000, concurrency: 3 });
    mem.prefetch();
    const t = Buffer.alloc(ROWS * mem.rowBytes);
    for (const [first, count] of [[0, 1], [350, 700], [4999, 1], [1234, 3000], [0, ROWS]] as const) {
      await mem.read(first, count, t);
      expect(t.subarray(0, count * mem.rowBytes).equals(bytes.subarray(first * mem.rowBytes, (first + count) * mem.rowBytes))).toBe(true);
    }
    // a read returns once its rows are in place, maybe before their block's GET has ended: count after close()
    await mem.close();
    expect(inner.stats.bytes).toBe(bytes.length);
    await expect(mem.read(0, 1, t)).rejects.toThrow(/after close/);

    await s3.put('data', 'moving2.npy', encodeNpy(data, [ROWS, DIMS]));
    const moving = new MemoryCachedRowSource(await S3RowSource.open(s3.handle, 's3://data/moving2.npy', { format: 'npy' }), { blockBytes: 10_000 });
    await moving.read(0, 10, t);
    await s3.put('data', 'moving2.npy', encodeNpy(matrix(ROWS, DIMS, 3), [ROWS, DIMS]));
    await expect(moving.read(4000, 10, t)).rejects.toBeInstanceOf(S3ObjectChangedError);
    await moving.close();
  });

  it('a stop ends a wait for blocks still downloading, while blocks already here are still served', async () => {
    // a slow S3: s3rver behind a proxy that holds every GET of row data for 1.5 s (the header GET goes through)
    const proxy = await startS3FaultProxy(s3, {
      fault: (r) => (r.method === 'GET' && !/bytes=0-/.test(String(r.headers.range)) ? delay(1500) : undefined),
    });
    const slow = createS3(proxy.settings);
    try {
      const stop = new AbortController();
      const mem = new MemoryCachedRowSource(await S3RowSource.open(slow, 's3://data/x.npy', { format: 'npy' }), { blockBytes: 10_000, signal: stop.signal });
      const t = Buffer.alloc(100 * mem.rowBytes);
      const t0 = Date.now();
      const pending = mem.read(0, 10, t);
      setTimeout(() => stop.abort(new Error('cancelled')), 100);
      await expect(pending).rejects.toThrow('cancelled');
      expect(Date.now() - t0).toBeLessThan(1000);
      await mem.close();
    } finally {
      slow.destroy();
      await proxy.stop();
    }
    // and with the rows already downloaded, a stop changes nothing for reads
    const stop = new AbortController();
    const mem = new MemoryCachedRowSource(await S3RowSource.open(s3.handle, 's3://data/x.npy', { format: 'npy' }), { blockBytes: 10_000, signal: stop.signal });
    const all = Buffer.alloc(ROWS * mem.rowBytes);
    await mem.read(0, ROWS, all);
    stop.abort(new Error('preempted'));
    const t = Buffer.alloc(10 * mem.rowBytes);
    await mem.read(20, 10, t);
    expect(t.equals(bytes.subarray(20 * mem.rowBytes, 30 * mem.rowBytes))).toBe(true);
    await mem.close();
  });

  it('the cache fills on the first pass, serves later passes, and is reused by the next job', async () => {
    const open = () => S3RowSource.open(s3.handle, 's3://data/x.npy', { format: 'npy' });
    const inner = await open();
    const cached = (await CachedRowSource.open(inner, cacheDir)) as CachedRowSource;
    expect(cached).toBeInstanceOf(CachedRowSource);
    const chunk = 1500;
    const t = Buffer.alloc(chunk * cached.rowBytes);
    const pass = async () => {
      const out: Buffer[] = [];
      for (let r = 0; r < ROWS; r += chunk) {
        const n = Math.min(chunk, ROWS - r);
        await cached.read(r, n, t);
        out.push(Buffer.from(t.subarray(0, n * cached.rowBytes)));
      }
      return Buffer.concat(out);
    };
    // while the file fills, an engine cannot read it itself: a failed write would close it under the engine
    expect(cached.fileRows(0, 10)).toBeUndefined();
    expect((await pass()).equals(bytes)).toBe(true);
    expect(cached.stats).toEqual({ hitRows: 0, missRows: ROWS });
    const requests = inner.stats.requests;
    expect((await pass()).equals(bytes)).toBe(true);
    expect(cached.stats.hitRows).toBe(ROWS);
    expect(inner.stats.requests).toBe(requests);
    await cached.close();
    expect(readdirSync(cacheDir).filter((f) => f.endsWith('.partial'))).toEqual([]);
    const again = (await CachedRowSource.open(await open(), cacheDir)) as CachedRowSource;
    const t2 = Buffer.alloc(ROWS * again.rowBytes);
    await again.read(0, ROWS, t2);
    expect(t2.equals(bytes)).toBe(true);
    expect(again.stats).toEqual({ hitRows: ROWS, missRows: 0 });
    // a complete file offers its rows where they lie (Engine.feedFile), counted as hits
    const at = again.fileRows(1234, 700)!;
    const direct = Buffer.alloc(700 * again.rowBytes);
    expect(readSync(at.fd, direct, 0, direct.length, at.offset)).toBe(direct.length);
    expect(direct.equals(bytes.subarray(1234 * again.rowBytes, 1934 * again.rowBytes))).toBe(true);
    expect(again.stats.hitRows).toBe(ROWS + 700);
    expect(() => again.fileRows(ROWS - 1, 2)).toThrow(RangeError);
    await again.close();
  });
});
