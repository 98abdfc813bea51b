/**
 * Output bucket faults, on real Redis + s3rver + engine:
 *   - the output bucket does not exist → the job fails once (no retry although it has 3 attempts), the reason names
 *     the bucket, nothing is written anywhere, the input object is untouched;
 *   - the output bucket refuses writes (403 AccessDenied from a proxy in front of s3rver, as a bucket policy would) →
 *     the same: one failed attempt naming the bucket, no partial outputs or checkpoints left under the prefix.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { readIterations } from '../../producer/job-state.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { headObject } from '../../worker/s3/objects.js';
import { createS3 } from '../../worker/s3/client.js';
import { accessDenied, startS3FaultProxy, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { startStack, type Stack } from '../integration/pipeline-fixture.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('output bucket missing or not writable', () => {
  let stack: Stack;
  let dir: string;
  let input: Buffer;
  let etag: string | undefined;
  let proxy: S3FaultProxy;

  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-outbucket-'));
    const { path } = await generateDataset(join(dir, 'd.npy'), { kind: 'blobs', rows: 20_000, dims: 8, centers: 4, seed: 3, clusterStd: 2 });
    input = readFileSync(path);
    etag = await stack.s3.put('data', 'd.npy', input);
    // writes (PUT/POST/DELETE) to bucket 'out' answer 403 AccessDenied; everything else goes through
    proxy = await startS3FaultProxy(stack.s3, {
      fault: (r) => (r.bucket === 'out' && r.method !== 'GET' && r.method !== 'HEAD' ? accessDenied() : undefined),
    });
  });
  afterAll(async () => {
    await stack?.stop();
    await proxy?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const expectInputUntouched = async () => {
    expect(sha(await stack.s3.get('data', 'd.npy'))).toBe(sha(input));
    expect((await headObject(stack.s3.handle, { bucket: 'data', key: 'd.npy' })).etag).toBe(etag);
    expect(stack.s3.keys('data')).toEqual(['d.npy']);
  };

  it('missing bucket: one attempt, the reason names the bucket, nothing written, input untouched', async () => {
    const worker = await stack.startWorker({ KMFLEET_THREADS: '1' });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/d.npy' }, k: 4, maxIter: 5, backend: 'cpu', output: 's3://no-such-bucket/runs' }, { jobId: 'nobucket-1' });
      await expect(stack.client.wait('nobucket-1', { timeoutMs: 30_000 })).rejects.toThrow(/no-such-bucket/);
      const info = await stack.client.get('nobucket-1');
      expect(info?.state).toBe('failed');
      expect(info?.attemptsMade).toBe(1); // not retried: a missing bucket does not come back by itself
      expect(info?.failedReason).toMatch(/no-such-bucket/);
      // found before any compute: not a single iteration ran
      const redis = new Redis(stack.redis.url);
      try {
        expect(await readIterations(redis, stack.client.keys, 'nobucket-1')).toEqual([]);
      } finally {
        redis.disconnect();
      }
      expect(stack.s3.keys('out')).toEqual([]);
      await expectInputUntouched();
    } finally {
      await worker.shutdown('test end');
    }
  });

  it('bucket refuses writes (403): one attempt, the reason names the bucket, no partial outputs, input untouched', async () => {
    const s3 = createS3(proxy.settings);
    const worker = await stack.startWorker({ KMFLEET_THREADS: '1' }, { s3 });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/d.npy' }, k: 4, maxIter: 5, backend: 'cpu', output: 's3://out/locked' }, { jobId: 'locked-1' });
      await expect(stack.client.wait('locked-1', { timeoutMs: 30_000 })).rejects.toThrow(/\bout\b/);
      const info = await stack.client.get('locked-1');
      expect(info?.state).toBe('failed');
      expect(info?.attemptsMade).toBe(1);
      expect(info?.failedReason).toMatch(/access denied/i);
      expect(info?.failedReason).toMatch(/s3:\/\/out\b|bucket 'out'|\bout\//);
      expect(proxy.requests.filter((r) => r.fault === 'AccessDenied').length).toBeGreaterThan(0);
      expect(stack.s3.keys('out')).toEqual([]);
      await expectInputUntouched();
    } finally {
      await worker.shutdown('test end');
      s3.destroy();
    }
  });
});
