/**
 * Retries against real faults: an HTTP proxy in front of s3rver that answers 503 SlowDown, resets connections before
 * answering, or cuts a ranged GET's body mid-stream. Reads must come back complete and correct; 4xx must not retry.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createS3, type S3Handle } from '../../worker/s3/client.js';
import { S3ObjectNotFoundError } from '../../worker/s3/errors.js';
import { headObject, putObjectBuffer, readRangeInto } from '../../worker/s3/objects.js';
import { backoffMs, isRetryableS3Error } from '../../worker/s3/retry.js';
import { reset, slowDown, startS3FaultProxy, truncate, type S3Fault, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';

describe('S3 retries through a fault-injecting proxy', () => {
  let s3: S3ServerHandle;
  let proxy: S3FaultProxy;
  let client: S3Handle;
  /** the faults of the next requests, in order; then requests go through */
  const faults: S3Fault[] = [];
  /** "METHOD fault" of the requests since `mark` */
  let mark = 0;
  const seen = () => proxy.requests.slice(mark).map((r) => `${r.method} ${r.fault ?? 'ok'}`);
  const body = randomBytes(3 * 1024 * 1024);

  beforeAll(async () => {
    s3 = await startS3Server({ buckets: ['data'] });
    await s3.put('data', 'blob', body);
    proxy = await startS3FaultProxy(s3, { fault: () => faults.shift() });
    client = createS3({ ...proxy.settings, maxAttempts: 4, retry: { budgetMs: 10_000, attempts: 4, baseMs: 5, maxMs: 20 } });
  });
  afterAll(async () => {
    client?.destroy();
    await proxy?.stop();
    await s3?.stop();
  });

  it('SlowDown and resets before the answer are retried with backoff (SDK), bodies cut mid-stream by us', async () => {
    const loc = { bucket: 'data', key: 'blob' };
    faults.push(slowDown(), reset());
    const { etag } = await headObject(client, loc);
    const target = Buffer.alloc(2 * 1024 * 1024);
    faults.push(truncate(1000), slowDown());
    mark = proxy.requests.length;
    await readRangeInto(client, loc, 1000, target.length, target, 0, { etag });
    expect(target.equals(body.subarray(1000, 1000 + target.length))).toBe(true);
    expect(seen()).toEqual(['GET truncate', 'GET SlowDown', 'GET ok']);
  });

  it('PUT of a Buffer survives a 503', async () => {
    faults.push(slowDown());
    mark = proxy.requests.length;
    await putObjectBuffer(client, { bucket: 'data', key: 'put-after-503' }, Buffer.from('hello'));
    expect((await s3.get('data', 'put-after-503')).toString()).toBe('hello');
    expect(seen()).toEqual(['PUT SlowDown', 'PUT ok']);
  });

  it('4xx is not retried; backoff has full jitter under a ceiling', async () => {
    mark = proxy.requests.length;
    await expect(headObject(client, { bucket: 'data', key: 'missing' })).rejects.toBeInstanceOf(S3ObjectNotFoundError);
    expect(seen()).toEqual(['HEAD ok']);
    expect(isRetryableS3Error({ $metadata: { httpStatusCode: 403 }, name: 'AccessDenied' })).toBe(false);
    expect(isRetryableS3Error({ $metadata: { httpStatusCode: 503 }, name: 'SlowDown' })).toBe(true);
    expect(isRetryableS3Error(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }))).toBe(true);
    const policy = { attempts: 5, baseMs: 100, maxMs: 1000 };
    expect(backoffMs(0, policy, () => 0.999)).toBe(99);
    expect(backoffMs(6, policy, () => 0.5)).toBe(500);
    expect(backoffMs(3, policy, () => 0)).toBe(0);
  });
});
