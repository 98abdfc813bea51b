import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FencedError } from '../../worker/checkpoints/errors.js';
import { CheckpointStore } from '../../worker/checkpoints/store.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';

describe('checkpoint store: S3 objects + fenced Redis record', () => {
  let s3: S3ServerHandle;
  let server: RedisServerHandle;
  let redis: Redis;
  beforeAll(async () => {
    [s3, server] = await Promise.all([startS3Server({ buckets: ['out'] }), startRedisServer()]);
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    redis?.disconnect();
    await Promise.all([s3?.stop(), server?.stop()]);
  });

  const lockKey = '{kmfleet}:jobs:job1:lock';
  const recordKey = '{kmfleet}:job:jobs:job1:checkpoint';
  const store = (token: string) =>
    new CheckpointStore({ redis, s3: s3.handle, jobId: 'job1', output: 's3://out/runs/', recordKey, lockKey, token, cancelKey: '{kmfleet}:job:jobs:job1:cancel' });

  it('saves, resumes by spec hash and ETag, and keeps the last two objects', async () => {
    await redis.set(lockKey, 'tokA');
    const a = store('tokA');
    expect(await a.claimJob()).toBe(1);
    for (let i = 1; i <= 4; i++) {
      const r = await a.save(i, Buffer.from(`state ${i}`), 'spec1', '"etag1"');
      expect(r?.generation).toBe(1);
      // two slots per claim, used in turn
      expect(r?.uri).toBe(`s3://out/runs/job1/_checkpoints/c1-${i % 2 ? 'a' : 'b'}.ckpt`);
    }
    expect(s3.keys('out', 'runs/job1/_checkpoints/')).toEqual(['runs/job1/_checkpoints/c1-a.ckpt', 'runs/job1/_checkpoints/c1-b.ckpt']);
    const latest = await a.loadLatest('spec1', '"etag1"');
    expect(latest.record?.iteration).toBe(4);
    expect('bytes' in latest && latest.bytes.toString()).toBe('state 4');
    expect((await a.loadLatest('spec2', '"etag1"')).record).toBeNull();
    expect(await a.loadLatest('spec1', '"etag2"')).toEqual({ record: null, reason: expect.stringMatching(/dataset ETag/) });
    // not newer: skipped, nothing changes
    expect(await a.save(4, Buffer.from('again'), 'spec1', '"etag1"')).toBeNull();
    expect((await a.record())?.iteration).toBe(4);
    // producer/job-state.ts reads the same record
    const { readCheckpointRecord } = await import('../../producer/job-state.js');
    const { keyspace } = await import('../../producer/keys.js');
    expect(keyspace().checkpoint('job1')).toBe(recordKey);
    expect(await readCheckpointRecord(redis, keyspace(), 'job1')).toMatchObject({ generation: 1, iteration: 4, specHash: 'spec1' });
  });

  it('a worker that lost its lock cannot overwrite the newer owner\'s checkpoint, even if it gets the lock back', async () => {
    const a = store('tokA');
    await redis.set(lockKey, 'tokA');
    await a.claimJob();
    await a.save(5, Buffer.from('A5'), 'spec1', '"etag1"');
    // A stalls; its lock expires and B takes the job and resumes
    await redis.set(lockKey, 'tokB');
    const b = store('tokB');
    await b.claimJob();
    const err = await a.save(6, Buffer.from('A6'), 'spec1', '"etag1"').catch((e) => e);
    expect(err).toBeInstanceOf(FencedError);
    expect(err.reason).toBe('lock-lost');
    await expect(a.assertOwner()).rejects.toBeInstanceOf(FencedError);
    expect((await b.save(6, Buffer.from('B6'), 'spec1', '"etag1"'))?.iteration).toBe(6);
    // A's lock renewer wins the key back (the lock is just a string): the claim generation still fences it
    await redis.set(lockKey, 'tokA');
    const again = await a.save(7, Buffer.from('A7'), 'spec1', '"etag1"').catch((e) => e);
    expect(again).toBeInstanceOf(FencedError);
    expect(again.reason).toBe('superseded');
    // what is left: A's last good checkpoint (the record's prevUri) and B's; A's fenced uploads are gone, and the
    // claim-1 slots were deleted as the record moved on
    expect(s3.keys('out', 'runs/job1/_checkpoints/')).toEqual(['runs/job1/_checkpoints/c2-a.ckpt', 'runs/job1/_checkpoints/c3-a.ckpt']);
    const latest = await b.loadLatest('spec1', '"etag1"');
    expect('bytes' in latest && latest.bytes.toString()).toBe('B6');
    await redis.set(lockKey, 'tokB');
    await expect(b.assertOwner()).resolves.toBeUndefined();
    // the job is done: the owner deletes both objects the record names; a fenced worker deletes nothing
    await a.cleanup();
    expect(s3.keys('out', 'runs/job1/_checkpoints/')).toHaveLength(2);
    await b.cleanup();
    expect(s3.keys('out', 'runs/job1/_checkpoints/')).toEqual([]);
  });

  it('a corrupted checkpoint object is not trusted', async () => {
    const rec = await store('tokB').record();
    const key = rec!.uri.replace('s3://out/', '');
    await s3.put('out', key, Buffer.from('garbage'));
    const r = await store('tokB').loadLatest('spec1', '"etag1"');
    expect(r.record).toBeNull();
    expect('reason' in r && r.reason).toMatch(/sha256/);
  });

  it('claiming needs the lock', async () => {
    await redis.set(lockKey, 'someone-else');
    await expect(store('tokC').claimJob()).rejects.toBeInstanceOf(FencedError);
  });
});
