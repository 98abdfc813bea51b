/**
 * Jobs that can never succeed fail once (no retry), with a message that names the problem, and leave nothing under
 * their output prefix; a worker refuses to start on a Redis that may evict keys. None of these reach the engine.
 */
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobFailedError } from '../../producer/errors/index.js';
import { JOB_NAME } from '../../producer/job-data.js';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { loadWorkerConfig } from '../../worker/config.js';
import { RedisPolicyError, startWorker } from '../../worker/worker.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { distBuilt, spawnWorker, startStack, type Stack } from './pipeline-fixture.js';

describe('worker: bad input fails once, clearly, with no outputs', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
    await stack.startWorker();
    const small = new Float32Array(10 * 4).map((_, i) => i);
    await stack.s3.put('data', 'small.npy', encodeNpy(small, [10, 4]));
    await stack.s3.put('data', 'garbage.npy', Buffer.from('definitely not numpy'));
    await stack.s3.put('data', 'rows.f32', Buffer.alloc(4 * 7 * 10 + 4));
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['bad header', { dataset: { uri: 's3://data/garbage.npy' }, k: 2 }, /bad dataset: not a \.npy file/],
    ['k > rows', { dataset: { uri: 's3://data/small.npy' }, k: 20 }, /10 rows, fewer than k = 20/],
    ['size mismatch', { dataset: { uri: 's3://data/rows.f32', format: 'f32', dims: 7 }, k: 2 }, /not a whole number of 7-dim rows/],
    ['missing object', { dataset: { uri: 's3://data/nope.npy' }, k: 2 }, /dataset not found: s3:\/\/data\/nope\.npy/],
    ['dims disagree with the header', { dataset: { uri: 's3://data/small.npy', dims: 5 }, k: 2 }, /has 4 dims, not the 5/],
    ['initial centroids missing', { dataset: { uri: 's3://data/small.npy' }, k: 2, init: 's3://data/none.npy' }, /initial centroids not found: s3:\/\/data\/none\.npy/],
    ['initial centroids of another k', { dataset: { uri: 's3://data/small.npy' }, k: 3, init: 's3://data/small.npy' }, /initial centroids s3:\/\/data\/small\.npy have shape \(10, 4\); expected \(3, dims\)/],
  ];
  for (const [name, spec, message] of cases) {
    it(name, async () => {
      const jobId = `bad-${name.replace(/[^a-z]+/g, '-')}`;
      await stack.client.enqueue({ ...spec, output: 's3://out/runs' }, { jobId });
      const err = await stack.client.wait(jobId, { timeoutMs: 20_000 }).catch((e) => e);
      expect(err).toBeInstanceOf(JobFailedError);
      expect(err.failedReason).toMatch(message);
      expect(err.attemptsMade).toBe(1);
      expect(stack.s3.keys('out', `runs/${jobId}/`)).toEqual([]);
    });
  }

  it('a spec that is invalid when the worker takes it (e.g. added by an old producer) names every bad field', async () => {
    const queue = new Queue('jobs', { connection: stack.redis.connection, prefix: '{kmfleet}' });
    try {
      await queue.add(JOB_NAME, { spec: { dataset: { uri: 'http://x' }, k: 0, output: 's3://out/runs' }, specHash: 'x' }, { jobId: 'bad-spec', attempts: 3 });
      const err = await stack.client.wait('bad-spec', { timeoutMs: 20_000 }).catch((e) => e);
      expect(err).toBeInstanceOf(JobFailedError);
      expect(err.failedReason).toMatch(/invalid job spec \(2 problems\): dataset\.uri: .*; k: /);
      expect(err.attemptsMade).toBe(1);
    } finally {
      await queue.close();
    }
  });
});

describe('worker: refuses an evicting Redis', () => {
  it('in process: RedisPolicyError saying what to set', async () => {
    const redis = await startRedisServer({ maxmemoryPolicy: 'allkeys-lru' });
    try {
      const config = loadWorkerConfig({ REDIS_URL: redis.url, KMFLEET_METRICS_PORT: '0', KMFLEET_LOG_LEVEL: 'silent' });
      const err = await startWorker(config).catch((e) => e);
      expect(err).toBeInstanceOf(RedisPolicyError);
      expect(err.message).toMatch(/maxmemory-policy is "allkeys-lru"; kmfleet workers need "noeviction".*CONFIG SET maxmemory-policy noeviction/);
    } finally {
      await redis.stop();
    }
  });

  it.skipIf(!distBuilt())('`kmfleet worker` exits 1 with the message', async () => {
    const redis = await startRedisServer({ maxmemoryPolicy: 'allkeys-lru' });
    try {
      const child = spawnWorker({ REDIS_URL: redis.url, KMFLEET_METRICS_PORT: '0' });
      const { code } = await child.exited;
      expect(code).toBe(1);
      expect(child.output()).toMatch(/kmfleet: error: Redis maxmemory-policy is "allkeys-lru"/);
    } finally {
      await redis.stop();
    }
  });
});
