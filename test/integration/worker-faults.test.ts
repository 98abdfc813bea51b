/**
 * Workers that die or are preempted, in child processes (node on the compiled dist/), on real Redis, S3 and engine:
 *   - SIGKILL after iteration 3: the lock expires, another worker resumes from the last checkpoint, and the final
 *     centroids and labels are bit for bit those of an uninterrupted run;
 *   - SIGTERM after iteration 3: the worker checkpoints, puts the job back without spending an attempt and exits 0
 *     inside its grace period; the next worker resumes it.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCheckpointRecord } from '../../producer/job-state.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { bytesOf, ensureDistBuilt, referenceFit, spawnWorker, startStack, until, type Stack } from './pipeline-fixture.js';

const ENGINE = { chunkRows: 8192, threads: 2 };
const SPEC = { k: 48, maxIter: 12, tol: 0, seed: 9 };
// short locks so that a killed worker's job comes back in about a second
const FAST_LOCKS = { KMFLEET_LOCK_DURATION_MS: '1500', KMFLEET_STALLED_INTERVAL_MS: '300' };

describe('worker faults (child processes)', () => {
  let stack: Stack;
  let dir: string;
  let path: string;
  let ref: Awaited<ReturnType<typeof referenceFit>>;
  const workerEnv = () => stack.env({ KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows), KMFLEET_THREADS: String(ENGINE.threads), ...FAST_LOCKS });
  const enqueue = (jobId: string) =>
    stack.client.enqueue({ dataset: { uri: 's3://data/normal.npy' }, ...SPEC, backend: 'cpu', output: 's3://out/runs' }, { jobId });
  const iteration = async (jobId: string) => (await stack.client.get(jobId))?.progress?.iteration ?? 0;
  const expectReference = async (jobId: string) => {
    const c = decodeNpy(await stack.s3.get('out', `runs/${jobId}/centroids.npy`));
    const a = decodeNpy(await stack.s3.get('out', `runs/${jobId}/assignments.npy`));
    expect(bytesOf(c.data).equals(bytesOf(ref.centroids))).toBe(true);
    expect(bytesOf(a.data).equals(bytesOf(ref.labels))).toBe(true);
  };

  beforeAll(async () => {
    ensureDistBuilt();
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-faults-'));
    path = (await generateDataset(join(dir, 'normal.npy'), { kind: 'normal', rows: 120_000, dims: 32, seed: 21 })).path;
    await stack.s3.put('data', 'normal.npy', readFileSync(path));
    ref = await referenceFit(path, SPEC, ENGINE);
    expect(ref.iterations).toBe(SPEC.maxIter);
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('SIGKILL after iteration 3: another worker resumes from the checkpoint; results equal an uninterrupted run', async () => {
    const first = spawnWorker(workerEnv());
    try {
      await enqueue('crash-1');
      // checkpoints are written while the next iteration runs: wait for the one of iteration 3
      const redis = await stack.client.connection();
      await until(async () => ((await readCheckpointRecord(redis, stack.client.keys, 'crash-1'))?.iteration ?? 0) >= 3, 30_000, 'checkpoint 3');
      first.kill('SIGKILL');
      expect((await first.exited).signal).toBe('SIGKILL');
    } finally {
      first.kill('SIGKILL');
    }
    const redis = await stack.client.connection();
    const checkpoint = await readCheckpointRecord(redis, stack.client.keys, 'crash-1');
    expect(checkpoint!.iteration).toBeGreaterThanOrEqual(3);
    expect(checkpoint!.iteration).toBeLessThan(SPEC.maxIter);

    const second = spawnWorker(workerEnv());
    try {
      const result = await stack.client.wait('crash-1', { timeoutMs: 60_000 });
      expect(result.resumedFrom?.iteration).toBeGreaterThanOrEqual(checkpoint!.iteration);
      expect(result.resumedFrom?.generation).toBe(1);
      expect(result.iterations).toBe(SPEC.maxIter);
      await expectReference('crash-1');
      const info = await stack.client.get('crash-1');
      expect(info?.attemptsMade).toBe(1); // the crash did not count as a failed attempt
    } finally {
      second.kill('SIGTERM');
      await second.exited;
    }
  });

  it('SIGTERM on an idle worker: exits 0 at once', async () => {
    const idle = spawnWorker({ ...workerEnv(), KMFLEET_LOG_LEVEL: 'info' });
    try {
      await until(async () => /worker started/.test(idle.output()), 20_000, 'the worker to start');
      const t0 = Date.now();
      idle.kill('SIGTERM');
      expect((await idle.exited).code).toBe(0);
      expect(Date.now() - t0).toBeLessThan(3_000);
      expect(idle.output()).toMatch(/worker stopped/);
    } finally {
      idle.kill('SIGKILL');
    }
  });

  it('SIGTERM after iteration 3: checkpoint, job back in the queue with no attempt spent, exit 0 in the grace period', async () => {
    const worker = spawnWorker({ ...workerEnv(), KMFLEET_SHUTDOWN_GRACE_MS: '8000', KMFLEET_LOG_LEVEL: 'info' });
    await enqueue('term-1');
    await until(async () => (await iteration('term-1')) >= 3, 30_000, 'iteration 3');
    const t0 = Date.now();
    worker.kill('SIGTERM');
    const exit = await worker.exited;
    const ms = Date.now() - t0;
    expect(exit.code).toBe(0);
    expect(ms).toBeLessThan(8000);
    expect(worker.output()).toMatch(/preempted: checkpointed and handed the job back/);

    const info = await stack.client.get('term-1');
    expect(info).toMatchObject({ state: 'waiting', attemptsMade: 0 });
    const redis = await stack.client.connection();
    const checkpoint = await readCheckpointRecord(redis, stack.client.keys, 'term-1');
    expect(checkpoint!.iteration).toBeGreaterThanOrEqual(3);
    expect(stack.s3.keys('out', 'runs/term-1/').filter((k) => !k.includes('/_checkpoints/'))).toEqual([]);

    const next = await stack.startWorker({ KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows), KMFLEET_THREADS: String(ENGINE.threads) });
    const result = await stack.client.wait('term-1', { timeoutMs: 60_000 });
    expect(result.resumedFrom?.iteration).toBe(checkpoint!.iteration);
    await expectReference('term-1');
    expect((await stack.client.get('term-1'))?.attemptsMade).toBe(1);
    await next.shutdown();
  });

  it('a worker frozen past its lock (SIGSTOP) is fenced when it wakes: it writes nothing, the successor\'s outputs stand', async () => {
    const frozen = spawnWorker({ ...workerEnv(), KMFLEET_LOG_LEVEL: 'info' });
    try {
      await enqueue('freeze-1');
      await until(async () => (await iteration('freeze-1')) >= 2, 30_000, 'iteration 2');
      frozen.kill('SIGSTOP');
      const t0 = Date.now();
      const mark = (what: string) => process.env.KMFLEET_TEST_DEBUG && console.log(`${what} at +${Date.now() - t0} ms`);
      const redis = await stack.client.connection();
      const next = await stack.startWorker({ KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows), KMFLEET_THREADS: String(ENGINE.threads), ...FAST_LOCKS });
      // the lock expires, the stalled check hands the job to `next`, which claims it (claim 2)
      await until(async () => (await redis.hget(stack.client.keys.checkpoint('freeze-1'), 'claimed')) === '2', 30_000, 'the second claim');
      mark('second claim');
      frozen.kill('SIGCONT');
      const result = await stack.client.wait('freeze-1', { timeoutMs: 60_000 });
      mark('completed');
      expect(result.iterations).toBe(SPEC.maxIter);
      await until(async () => /lost the job|could not renew job locks/.test(frozen.output()), 20_000, 'the frozen worker to notice');
      if (process.env.KMFLEET_TEST_DEBUG) console.log(frozen.output().split('\n').filter((l) => /lost|renew|fenced|writing/.test(l)).join('\n'));
      await expectReference('freeze-1');
      expect(stack.s3.keys('out', 'runs/freeze-1/')).toEqual(['runs/freeze-1/assignments.npy', 'runs/freeze-1/centroids.npy', 'runs/freeze-1/summary.json']);
      expect(JSON.parse((await stack.s3.get('out', 'runs/freeze-1/summary.json')).toString()).resumedFrom).toBeDefined();
      mark('checked');
      await next.shutdown();
      mark('shut down');
    } finally {
      frozen.kill('SIGKILL');
      await frozen.exited;
    }
  });
});
