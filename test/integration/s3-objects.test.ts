import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accessDenied, reply, startS3FaultProxy, type S3Fault } from '../helpers/s3-fault-proxy.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';
import { createS3 } from '../../worker/s3/client.js';
import { S3ObjectChangedError, S3ObjectNotFoundError } from '../../worker/s3/errors.js';
import { assertBucketExists, getObjectBuffer, headObject, readRangeInto } from '../../worker/s3/objects.js';
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
    expect(parseS3Uri('s3://bkt/a/b.npy')).toEqual({ bucket: 'bkt', key: 'a/b.npy' });
    expect(childOf('s3://bkt/out/', 'job1', 'summary.json')).toEqual({ bucket: 'bkt', key: 'out/job1/summary.json' });
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

  it('the output bucket check: an existing bucket passes, a missing one is NoSuchBucket naming it, asking for no keys', async () => {
    await s3.put('data', 'runs/a/summary.json', Buffer.from('{}'));
    await s3.put('data', 'runs/b/summary.json', Buffer.from('{}'));
    await expect(assertBucketExists(s3.handle, 'data')).resolves.toBeUndefined();
    const err = await assertBucketExists(s3.handle, 'no-such-bucket').catch((e) => e);
    expect(err?.name).toBe('NoSuchBucket');
    expect(err?.s3Bucket).toBe('no-such-bucket');
    // what s3rver answers a HEAD with (a listing of every key, read synchronously) is not what the check asks for
    const answers: string[] = [];
    const proxy = await startS3FaultProxy(s3, { onResponse: (r, status, body) => answers.push(`${r.method} ${r.operation} ${status} ${body.toString('utf8')}`) });
    const client = createS3({ ...proxy.settings, maxAttempts: 1 });
    try {
      await assertBucketExists(client, 'data');
      expect(proxy.requests.map((r) => `${r.method} ${r.operation} max-keys=${r.url.searchParams.get('max-keys')}`)).toEqual(['GET BucketRequest max-keys=0']);
      expect(answers).toHaveLength(1);
      expect(answers[0]).toMatch(/^GET BucketRequest 200 /);
      expect(answers[0]).not.toMatch(/summary\.json/);
    } finally {
      client.destroy();
      await proxy.stop();
    }
  });

  it('the output bucket check: a refusal stays a refusal; a 404 without a body is still the bucket missing', async () => {
    const faults: S3Fault[] = [accessDenied(), reply(404)];
    const proxy = await startS3FaultProxy(s3, { fault: () => faults.shift() });
    const client = createS3({ ...proxy.settings, maxAttempts: 1 });
    try {
      const denied = await assertBucketExists(client, 'data').catch((e) => e);
      expect(denied?.name).toBe('AccessDenied');
      expect(denied?.$metadata?.httpStatusCode).toBe(403);
      const missing = await assertBucketExists(client, 'data').catch((e) => e);
      expect(missing?.name).toBe('NoSuchBucket');
      expect(missing?.s3Bucket).toBe('data');
    } finally {
      client.destroy();
      await proxy.stop();
    }
  });
});
