import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';
import { S3ObjectChangedError, S3ObjectNotFoundError } from '../../worker/s3/errors.js';
import { getObjectBuffer, headObject, readRangeInto } from '../../worker/s3/objects.js';
import { childOf, joinKey, parseS3Uri } from '../../worker/s3/uri.js';

describe('S3 objects against s3rver', () => {
  let s3: S3ServerHandle;
  beforeAll(async () => {
    s3 = await startS3Server({ buckets: ['data'] });
  });
  afterAll(async () => {
    await s3?.stop();
  });

  it('parses and joins s3 uris', () => {
    expect(parseS3Uri('s3://b/a/b.npy')).toEqual({ bucket: 'b', key: 'a/b.npy' });
    expect(childOf('s3://b/out/', 'job1', 'summary.json')).toEqual({ bucket: 'b', key: 'out/job1/summary.json' });
    expect(joinKey('', 'x')).toBe('x');
    expect(() => parseS3Uri('http://x')).toThrow(/s3:\/\//);
  });

  it('HEAD gives size and ETag; ranged reads land at the right offset', async () => {
    const body = randomBytes(1_000_003);
    await s3.put('data', 'blob.bin', body);
    const info = await headObject(s3.handle, { bucket: 'data', key: 'blob.bin' });
    expect(info.size).toBe(body.length);
    expect(info.etag).toMatch(/^".+"$/);
    const target = Buffer.alloc(500_000 + 16);
    await readRangeInto(s3.handle, { bucket: 'data', key: 'blob.bin' }, 123_457, 500_000, target, 16, { etag: info.etag });
    expect(target.subarray(16).equals(body.subarray(123_457, 623_457))).toBe(true);
    expect(target.subarray(0, 16).every((b) => b === 0)).toBe(true);
    expect(s3.keys('data')).toEqual(['blob.bin']);
    expect((await getObjectBuffer(s3.handle, { bucket: 'data', key: 'blob.bin' })).equals(body)).toBe(true);
  });

  it('a missing object is S3ObjectNotFoundError; a changed one is S3ObjectChangedError', async () => {
    await expect(headObject(s3.handle, { bucket: 'data', key: 'nope' })).rejects.toBeInstanceOf(S3ObjectNotFoundError);
    await s3.put('data', 'changing.bin', Buffer.alloc(1000, 1));
    const { etag } = await headObject(s3.handle, { bucket: 'data', key: 'changing.bin' });
    await s3.put('data', 'changing.bin', Buffer.alloc(1000, 2));
    const target = Buffer.alloc(100);
    const err = await readRangeInto(s3.handle, { bucket: 'data', key: 'changing.bin' }, 0, 100, target, 0, { etag }).catch((e) => e);
    expect(err).toBeInstanceOf(S3ObjectChangedError);
    expect(String(err.message)).toMatch(/changed during the job/);
  });
});
