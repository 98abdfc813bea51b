/**
 * redis-server without persistence is killed mid-job and comes back empty: the job no longer exists. The worker (a
 * child process) reconnects and goes on iterating until it notices; the iterations it finishes meanwhile must not be
 * written: no stray iteration stream appears for a job that is gone (the worker's writes are fenced on its lock).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { ensureDistBuilt, spawnWorker, startStack, until, type ChildWorker, type Stack } from '../integration/pipeline-fixture.js';

describe('redis-server restarted without its data mid-job', () => {
  let stack: Stack;
  let dir: string;
  let worker: ChildWorker | undefined;

  beforeAll(async () => {
    ensureDistBuilt();
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-redis-loss-'));
    const path = (await generateDataset(join(dir, 'n.npy'), { kind: 'normal', rows: 60_000, dims: 32, seed: 8 })).path;
    await stack.s3.put('data', 'n.npy', readFileSync(path));
  });
  afterAll(async () => {
    worker?.kill('SIGKILL');
    await worker?.exited;
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the worker writes no iteration entry for the job that Redis lost', async () => {
    worker = spawnWorker(stack.env({ KMFLEET_CHUNK_ROWS: '8192', KMFLEET_THREADS: '1', KMFLEET_LOG_LEVEL: 'info' }));
    const jobId = 'lost-1';
    await stack.client.enqueue({ dataset: { uri: 's3://data/n.npy' }, k: 32, maxIter: 300, tol: 0, seed: 4, backend: 'cpu', output: 's3://out/rl' }, { jobId });
    await until(async () => ((await stack.client.get(jobId))?.progress?.iteration ?? 0) >= 3, 60_000, 'iteration 3');
    // down and back at once, empty: the worker's next iteration writes reach a Redis that has never heard of the job
    await stack.redis.kill('SIGKILL');
    await stack.redis.restart();
    const redis = await stack.client.connection();
    await until(async () => redis.ping().catch(() => null), 20_000, 'Redis back');
    // the worker reconnects and goes on; then it notices the job is gone (a fenced write, a lock it can't renew)
    await until(async () => /lost the job|lost the lock|could not renew|job attempt failed/.test(worker!.output()), 30_000, 'the worker to let the job go');
    expect(await redis.exists(stack.client.keys.iterations(jobId))).toBe(0);
    expect(await stack.client.get(jobId)).toBeNull();
  });
});
