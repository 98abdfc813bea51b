/**
 * The per-iteration Redis writes (worker/iteration-writes.ts) on a real redis-server: queued behind the microtasks
 * that start the next pass, in iteration order, at most one iteration's outstanding, and a failed write surfaces at
 * the next iteration and at flush().
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendIteration, readIterations } from '../../producer/job-state.js';
import { keyspace } from '../../producer/keys.js';
import { IterationWrites } from '../../worker/iteration-writes.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';

describe('IterationWrites', () => {
  let server: RedisServerHandle;
  let redis: Redis;
  const keys = keyspace({ prefix: 'itw' });
  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  const record = (iteration: number) => ({ iteration, inertia: 100 / iteration, reassigned: 10 - iteration, shift: 1 / iteration, ms: 5 });

  it('sends each iteration\'s writes after the microtasks that follow it (where the next pass starts), in order', async () => {
    const writes = new IterationWrites();
    const events: string[] = [];
    for (let i = 1; i <= 5; i++) {
      await writes.next(() => {
        events.push(`write ${i}`);
        return appendIteration(redis, keys, 'job-a', record(i));
      });
      // what the driver does next, in microtasks: the next pass begins before this iteration's writes go out
      await Promise.resolve();
      events.push(`pass ${i + 1}`);
    }
    await writes.flush();
    expect(events).toEqual(['pass 2', 'write 1', 'pass 3', 'write 2', 'pass 4', 'write 3', 'pass 5', 'write 4', 'pass 6', 'write 5']);
    expect((await readIterations(redis, keys, 'job-a')).map((r) => r.iteration)).toEqual([1, 2, 3, 4, 5]);
  });

  it('waits for the previous iteration\'s writes, and a failed write stops the next iteration and flush()', async () => {
    const writes = new IterationWrites();
    let release!: () => void;
    const slow = new Promise<void>((r) => (release = r));
    await writes.next(() => slow);
    let second = false;
    const next = writes.next(async () => void (second = true)).then(() => 'queued');
    await new Promise((r) => setTimeout(r, 20));
    expect(second).toBe(false); // still waiting for the first
    release();
    expect(await next).toBe('queued');
    await writes.flush();
    expect(second).toBe(true);

    // a key that holds a string: XADD fails with WRONGTYPE
    await redis.set('itw-not-a-stream', 'x');
    const xadd = () => redis.xadd('itw-not-a-stream', '*', 'iteration', '1');
    await writes.next(xadd);
    await expect(writes.flush()).rejects.toThrow(/WRONGTYPE/);
    await expect(writes.next(xadd)).rejects.toThrow(/WRONGTYPE/);
  });

  it('appendIteration rejects when its XADD fails inside the transaction (EXEC answers per command)', async () => {
    await redis.set(keys.iterations('job-wrongtype'), 'x');
    await expect(appendIteration(redis, keys, 'job-wrongtype', record(1))).rejects.toThrow(/WRONGTYPE/);
    await appendIteration(redis, keys, 'job-ok', record(1));
    expect((await readIterations(redis, keys, 'job-ok')).map((r) => r.iteration)).toEqual([1]);
  });
});
