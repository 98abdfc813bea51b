/**
 * Ranged GETs whose body the client's DirectReadHandler lands straight in the caller's buffer (worker/s3/direct-read.ts),
 * against s3rver and a fault proxy in front of it: the same bytes as through the SDK's own handler, progress in order,
 * an ETag other than pinned never lands, error answers still become the SDK's typed errors, cut bodies are read again,
 * a stop ends a GET in flight.
 */
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createS3, type S3Handle } from '../../worker/s3/client.js';
import { DIRECT_BODY, type DirectBody } from '../../worker/s3/direct-read.js';
import { S3ObjectChangedError, S3ShortReadError } from '../../worker/s3/errors.js';
import { headObject, readRangeInto } from '../../worker/s3/objects.js';
import { accessDenied, delay, reply, startS3FaultProxy, truncate, type S3Fault, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';

describe('direct ranged reads (DirectReadHandler)', () => {
  let s3: S3ServerHandle;
  let proxy: S3FaultProxy;
  let viaProxy: S3Handle;
  const faults: S3Fault[] = [];
  const body = randomBytes(5 * 1024 * 1024 + 13);
  const loc = { bucket: 'data', key: 'blob' };
  let etag: string;

  beforeAll(async () => {
    s3 = await startS3Server({ buckets: ['data'] });
    await s3.put('data', 'blob', body);
    etag = (await headObject(s3.handle, loc)).etag;
    proxy = await startS3FaultProxy(s3, { fault: () => faults.shift() });
    viaProxy = createS3({ ...proxy.settings, maxAttempts: 3, retry: { budgetMs: 10_000, attempts: 3, baseMs: 5, maxMs: 20 } });
  });
  afterAll(async () => {
    viaProxy?.destroy();
    await proxy?.stop();
    await s3?.stop();
  });

  it('lands the body in place (no body stream), the same bytes as the SDK handler, progress rising to the length', async () => {
    const start = 777_777;
    const length = 4 * 1024 * 1024 + 5;
    const target = Buffer.alloc(length + 32);
    const seen: number[] = [];
    const direct: DirectBody = { target, offset: 32, length, etag, onProgress: (b) => seen.push(b) };
    const r = await s3.handle.client.send(
      new GetObjectCommand({ Bucket: 'data', Key: 'blob', Range: `bytes=${start}-${start + length - 1}` }),
      { [DIRECT_BODY]: direct } as object,
    );
    expect(direct.written).toBe(length);
    expect(r.ETag).toBe(etag);
    expect(target.subarray(32).equals(body.subarray(start, start + length))).toBe(true);
    expect(target.subarray(0, 32).every((b) => b === 0)).toBe(true);
    expect(seen.at(-1)).toBe(length);
    expect(seen.every((b, i) => i === 0 || b > seen[i - 1])).toBe(true);

    // switched off: the same read through the SDK's handler, body as a stream
    const plain = createS3({ ...s3.settings, directReads: false });
    try {
      const other = Buffer.alloc(length);
      const d2: DirectBody = { target: other, offset: 0, length };
      await plain.client.send(new GetObjectCommand({ Bucket: 'data', Key: 'blob', Range: `bytes=0-${length - 1}` }), { [DIRECT_BODY]: d2 } as object);
      expect(d2.written).toBeUndefined();
      await readRangeInto(plain, loc, start, length, other, 0, { etag });
      expect(other.equals(target.subarray(32))).toBe(true);
    } finally {
      plain.destroy();
    }
  });

  it('an answer with another ETag than pinned lands nothing and reports no progress', async () => {
    await s3.put('data', 'moving', Buffer.alloc(100_000, 1));
    const pinned = (await headObject(s3.handle, { bucket: 'data', key: 'moving' })).etag;
    await s3.put('data', 'moving', Buffer.alloc(100_000, 2));
    const target = Buffer.alloc(50_000);
    let progress = 0;
    const err = await readRangeInto(s3.handle, { bucket: 'data', key: 'moving' }, 0, 50_000, target, 0, { etag: pinned, onProgress: (b) => (progress = b) }).catch((e) => e);
    expect(err).toBeInstanceOf(S3ObjectChangedError);
    expect(progress).toBe(0);
    expect(target.every((b) => b === 0)).toBe(true);
  });

  it('error answers become the SDK\'s typed errors (not retried); a short answer or a cut body is read again', async () => {
    const target = Buffer.alloc(1_000_000);
    let mark = proxy.requests.length;
    faults.push(accessDenied());
    const denied = await readRangeInto(viaProxy, loc, 0, target.length, target, 0, { etag }).catch((e) => e);
    expect(denied.name).toBe('AccessDenied');
    expect(denied.$metadata?.httpStatusCode).toBe(403);
    expect(proxy.requests.length - mark).toBe(1);

    // a 200 whose body is not the range asked for is not taken as it; a body cut mid-way is not either
    mark = proxy.requests.length;
    faults.push(reply(200, 'not the range'), truncate(300_000));
    await readRangeInto(viaProxy, loc, 1000, target.length, target, 0, { etag });
    expect(target.equals(body.subarray(1000, 1000 + target.length))).toBe(true);
    expect(proxy.requests.slice(mark).map((r) => r.fault ?? 'ok')).toEqual(['reply 200', 'truncate', 'ok']);

    faults.push(reply(200, 'x'), reply(200, 'x'), reply(200, 'x'));
    await expect(readRangeInto(viaProxy, loc, 0, 100, target, 0, { etag })).rejects.toBeInstanceOf(S3ShortReadError);
  });

  it('a stop aborts a GET in flight', async () => {
    faults.push(delay(5000));
    const stop = new AbortController();
    const t0 = performance.now();
    setTimeout(() => stop.abort(new Error('stop')), 100);
    const err = await readRangeInto(viaProxy, loc, 0, 1000, Buffer.alloc(1000), 0, { etag, signal: stop.signal }).catch((e) => e);
    expect(err).toBeInstanceOf(Error);
    expect(performance.now() - t0).toBeLessThan(3000);
  });
});
