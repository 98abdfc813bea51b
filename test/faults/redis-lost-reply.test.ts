/**
 * A worker's Redis write whose reply is lost on the wire: redis-server ran it, the connection died before the answer
 * came back, and ioredis sends the command again once it has reconnected (as it does for every unanswered command).
 * Each of the worker's own job-state writes must then take effect once, on a real redis-server behind a TCP proxy
 * that drops exactly that reply:
 *   - an iteration's entry is in the history stream once (not twice: the redis-restart fault test saw that);
 *   - a checkpoint's save keeps its object: the resent save must not read as "not newer" and delete the object
 *     that the record, written by the first run of the script, now names;
 *   - the claim and the commit point still hold for this worker.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { appendIteration, readCheckpointRecord } from '../../producer/job-state.js';
import { keyspace } from '../../producer/keys.js';
import { createRedisClient } from '../../producer/redis-factory.js';
import { CheckpointStore } from '../../worker/checkpoints/store.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';

describe('a Redis reply lost on the wire, the command resent on reconnect', () => {
  let server: RedisServerHandle;
  let s3: S3ServerHandle;
  let proxy: TcpProxy;
  let direct: Redis;
  /** the worker's connection, through the proxy, made as the worker makes it */
  let worker: Redis;
  const keys = keyspace({ prefix: 'lost' });
  const jobId = 'job1';
  const lock = { key: 'lost:jobs:job1:lock', token: 'tokA' };

  beforeAll(async () => {
    [server, s3] = await Promise.all([startRedisServer(), startS3Server({ buckets: ['out'] })]);
    proxy = await startTcpProxy(server.port);
    direct = new Redis(server.url);
    worker = createRedisClient({ host: '127.0.0.1', port: proxy.port }, 'worker') as Redis;
    await worker.ping();
  });
  afterAll(async () => {
    worker?.disconnect();
    direct?.disconnect();
    await proxy?.stop();
    await Promise.all([server?.stop(), s3?.stop()]);
  });
  beforeEach(async () => {
    await direct.flushall();
    await direct.set(lock.key, lock.token);
  });

  /** runs `write` with the reply to its (first) command lost; the write itself must still succeed */
  async function withLostReply<T>(write: () => Promise<T>): Promise<T> {
    const lost = proxy.loseNextReply();
    const result = write();
    await lost;
    return result;
  }

  it('an iteration whose append was answered into the void is recorded once', async () => {
    const rec = (iteration: number) => ({ iteration, inertia: 10 / iteration, reassigned: 3, shift: 0.5, ms: 4 });
    expect(await appendIteration(worker, keys, jobId, rec(1), { ...lock, claim: 1 })).toBe(true);
    expect(await withLostReply(() => appendIteration(worker, keys, jobId, rec(2), { ...lock, claim: 1 }))).toBe(true);
    expect(await appendIteration(worker, keys, jobId, rec(3), { ...lock, claim: 1 })).toBe(true);
    const raw = (await direct.xrange(keys.iterations(jobId), '-', '+')).map(([, f]) => Number(f[f.indexOf('iteration') + 1]));
    expect(raw).toEqual([1, 2, 3]);
    // a resumed job's next claim redoes iterations after its checkpoint: those are new entries, not resends
    expect(await appendIteration(worker, keys, jobId, rec(3), { ...lock, claim: 2 })).toBe(true);
    const again = (await direct.xrange(keys.iterations(jobId), '-', '+')).map(([, f]) => Number(f[f.indexOf('iteration') + 1]));
    expect(again).toEqual([1, 2, 3, 3]);
  });

  it('a checkpoint save answered into the void keeps the object its record names; claim and commit hold', async () => {
    const store = new CheckpointStore({
      redis: worker, s3: s3.handle, jobId, output: 's3://out/runs/',
      recordKey: keys.checkpoint(jobId), lockKey: lock.key, token: lock.token, cancelKey: keys.cancel(jobId),
    });
    expect(await withLostReply(() => store.claimJob())).toBeGreaterThan(0);
    await expect(store.assertOwner()).resolves.toBeUndefined();
    expect((await store.save(1, Buffer.from('state 1'), 'spec1', '"etag1"'))?.iteration).toBe(1);
    const saved = await withLostReply(() => store.save(2, Buffer.from('state 2'), 'spec1', '"etag1"'));
    expect(saved?.iteration).toBe(2);
    const record = await readCheckpointRecord(direct, keys, jobId);
    expect(record).toMatchObject({ iteration: 2, uri: saved?.uri });
    const latest = await store.loadLatest('spec1', '"etag1"');
    expect('bytes' in latest && latest.bytes.toString()).toBe('state 2');
    // the save after it carries on as usual
    expect((await store.save(3, Buffer.from('state 3'), 'spec1', '"etag1"'))?.iteration).toBe(3);
    expect(await withLostReply(() => store.beginCommit())).toBeUndefined();
    expect(await direct.hget(keys.checkpoint(jobId), 'committed')).toBe(String(store.claim));
  });
});
