// The Redis side of the contract the worker writes: result history + latest, iteration stream, checkpoint record (read side).
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KmfleetClient, type JobResult } from '../../producer/index.js';
import { appendIteration, clearJobState, readCheckpointRecord, readIterations } from '../../producer/job-state.js';
import { keyspace } from '../../producer/keys.js';
import { readHistory, readLatest, readModels, recordResult } from '../../producer/results.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';

let server: RedisServerHandle;
let redis: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  redis = new Redis(server.url);
});
afterAll(async () => {
  redis.disconnect();
  await server.stop();
});

function result(jobId: string, finishedAt: number, name = 'emb'): JobResult {
  const prefix = `s3://out-bkt/runs/${jobId}`;
  return {
    jobId, name, finishedAt, startedAt: finishedAt - 10,
    spec: { version: 1, dataset: { uri: 's3://d-bkt/x.npy', format: 'npy' }, k: 4, metric: 'l2', init: 'previous', maxIter: 10,
      tol: 1e-4, tolReassign: 0, seed: 0, precision: 'auto', output: 's3://out-bkt/runs', name, checkpointEvery: 1, backend: 'auto' },
    specHash: 'h', dataset: { uri: 's3://d-bkt/x.npy', etag: '"e"', format: 'npy', rows: 10, dims: 2 }, k: 4,
    iterations: 3, converged: true, stopReason: 'tol', inertia: 1.5, emptyClustersReseeded: 0, backend: 'cpu',
    device: 'test', precision: 'fp32', timings: { totalMs: 10 },
    outputs: { prefix, centroids: `${prefix}/centroids.npy`, assignments: `${prefix}/assignments.npy`, summary: `${prefix}/summary.json` },
  };
}

describe('model result history', () => {
  it('lists results newest first by finish time, whatever order they were recorded in', async () => {
    const keys = keyspace({ prefix: 'h1' });
    expect(await readLatest(redis, keys, 'emb')).toBeNull();
    expect(await readHistory(redis, keys, 'emb')).toEqual([]);
    expect(await recordResult(redis, keys, 'emb', result('b', 2000))).toBe(true);
    expect(await recordResult(redis, keys, 'emb', result('c', 3000))).toBe(true);
    // A slow job that finishes "in the past" (it started earlier) does not become the latest.
    expect(await recordResult(redis, keys, 'emb', result('a', 1000))).toBe(false);
    expect((await readHistory(redis, keys, 'emb')).map((r) => r.jobId)).toEqual(['c', 'b', 'a']);
    expect((await readHistory(redis, keys, 'emb', { limit: 2 })).map((r) => r.jobId)).toEqual(['c', 'b']);
    expect((await readLatest(redis, keys, 'emb'))!.jobId).toBe('c');
    // Recording the same job again (a retry after a lost lock) replaces its entry instead of duplicating it.
    await recordResult(redis, keys, 'emb', { ...result('b', 4000), inertia: 0.5 });
    const hist = await readHistory(redis, keys, 'emb');
    expect(hist.map((r) => r.jobId)).toEqual(['b', 'c', 'a']);
    expect(hist[0].inertia).toBe(0.5);
    expect((await readLatest(redis, keys, 'emb'))!.jobId).toBe('b');
    await recordResult(redis, keys, 'other', result('z', 1, 'other'));
    expect(await readModels(redis, keys)).toEqual(['emb', 'other']);
    // The SDK reads the same.
    const c = new KmfleetClient({ connection: server.url, prefix: 'h1' });
    expect((await c.history('emb', { limit: 1 })).map((r) => r.jobId)).toEqual(['b']);
    expect((await c.latest('emb'))!.jobId).toBe('b');
    expect(await c.latest('nothing')).toBeNull();
    expect(await c.models()).toEqual(['emb', 'other']);
    await c.close();
  });

  it('trims the history to its limit, results included', async () => {
    const keys = keyspace({ prefix: 'h2' });
    for (let i = 1; i <= 5; i++) await recordResult(redis, keys, 'm', result(`j${i}`, i * 100, 'm'), { historyLimit: 3 });
    expect((await readHistory(redis, keys, 'm', { limit: 10 })).map((r) => r.jobId)).toEqual(['j5', 'j4', 'j3']);
    expect(await redis.hlen(keys.modelResults('m'))).toBe(3);
  });
});

describe('per-job state', () => {
  it('keeps the iteration history in a stream; a resumed job\'s repeated iterations replace the old ones', async () => {
    const keys = keyspace({ prefix: 's1' });
    for (const it of [1, 2, 3]) await appendIteration(redis, keys, 'j', { iteration: it, inertia: 10 - it, reassigned: 5, shift: 0.5, ms: 7 });
    await appendIteration(redis, keys, 'j', { iteration: 3, inertia: 6.5, reassigned: 4, shift: 0.25, ms: 8 });
    await appendIteration(redis, keys, 'j', { iteration: 4, inertia: 6, reassigned: 1, shift: 0.125, ms: 8 });
    expect(await redis.type(keys.iterations('j'))).toBe('stream');
    const fields = (await redis.xrange(keys.iterations('j'), '-', '+'))[0][1];
    expect(fields.filter((_, i) => i % 2 === 0)).toEqual(['iteration', 'inertia', 'reassigned', 'shift', 'ms']);
    expect(await readIterations(redis, keys, 'j')).toEqual([
      { iteration: 1, inertia: 9, reassigned: 5, shift: 0.5, ms: 7 },
      { iteration: 2, inertia: 8, reassigned: 5, shift: 0.5, ms: 7 },
      { iteration: 3, inertia: 6.5, reassigned: 4, shift: 0.25, ms: 8 },
      { iteration: 4, inertia: 6, reassigned: 1, shift: 0.125, ms: 8 },
    ]);
    expect(await redis.pttl(keys.iterations('j'))).toBeGreaterThan(0);
  });

  it('reads a checkpoint record written with the shared field names, and clearJobState removes it', async () => {
    const keys = keyspace({ prefix: 's2' });
    expect(await readCheckpointRecord(redis, keys, 'j')).toBeNull();
    await redis.hset(keys.checkpoint('j'), { generation: '2', iteration: '7', uri: 's3://b12/j/_checkpoints/2-7.bin', specHash: 'h', updatedAt: '42' });
    expect(await readCheckpointRecord(redis, keys, 'j')).toEqual({
      generation: 2, iteration: 7, uri: 's3://b12/j/_checkpoints/2-7.bin', specHash: 'h', updatedAt: 42,
    });
    await clearJobState(redis, keys, 'j');
    expect(await readCheckpointRecord(redis, keys, 'j')).toBeNull();
  });
});

describe('connection checks', () => {
  it('assertNoEviction accepts noeviction and refuses an evicting Redis with a clear message', async () => {
    const { assertNoEviction, maxmemoryPolicy } = await import('../../producer/eviction-policy.js');
    expect(await maxmemoryPolicy(redis)).toBe('noeviction');
    await expect(assertNoEviction(redis)).resolves.toBeUndefined();
    const lru = await startRedisServer({ maxmemoryPolicy: 'allkeys-lru', maxmemory: '64mb' });
    const r = new Redis(lru.url);
    try {
      await expect(assertNoEviction(r)).rejects.toThrow(/maxmemory-policy is allkeys-lru; kmfleet needs noeviction/);
    } finally {
      r.disconnect();
      await lru.stop();
    }
  });
});
