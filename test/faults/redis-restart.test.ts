/**
 * redis-server (AOF on, fsync always) crashes (SIGKILL) in the middle of a job and comes back on the same port a
 * moment later. A worker in a child process and the producer SDK in this process must both reconnect by themselves;
 * the job completes exactly once (one completion, one result in the model history, one summary.json) with the same
 * bytes as an uninterrupted run, and its iteration stream is intact: every iteration 1..N present, none repeated
 * except those a resume legitimately redoes (after resumedFrom.iteration).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readIterations } from '../../producer/job-state.js';
import { RedisUnavailableError } from '../../producer/errors/redis-unavailable-error.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { ensureDistBuilt, expectCompletedOnce, iterationStreamDefects, spawnWorker, startStack, until, type ChildWorker, type Stack } from '../integration/pipeline-fixture.js';

const ENGINE = { chunkRows: 8192, threads: 1 };
const SPEC = { k: 32, maxIter: 40, tol: 0, seed: 4 };

describe('redis-server restarted mid-job', () => {
  let stack: Stack;
  let dir: string;
  let path: string;
  let worker: ChildWorker | undefined;

  beforeAll(async () => {
    ensureDistBuilt();
    stack = await startStack({ redis: { appendonly: true } });
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-redis-restart-'));
    path = (await generateDataset(join(dir, 'n.npy'), { kind: 'normal', rows: 60_000, dims: 32, seed: 8 })).path;
    await stack.s3.put('data', 'n.npy', readFileSync(path));
  });
  afterAll(async () => {
    if (worker) {
      worker.kill('SIGKILL');
      await worker.exited;
    }
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('worker and producer reconnect; the job completes once; the iteration stream has no gap or stray duplicate', async () => {
    worker = spawnWorker(stack.env({ KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows), KMFLEET_THREADS: String(ENGINE.threads), KMFLEET_LOG_LEVEL: 'info' }));
    const jobId = 'restart-1';
    await stack.client.enqueue({ dataset: { uri: 's3://data/n.npy' }, ...SPEC, backend: 'cpu', output: 's3://out/rr', name: 'rr-model' }, { jobId });
    // iteration 4's progress is written after iteration 3's log line (which follows its checkpoint): waiting for 4, the
    // three log lines checked below are out before the crash (waiting for 3 raced with iteration 3's checkpoint write)
    await until(async () => ((await stack.client.get(jobId))?.progress?.iteration ?? 0) >= 4, 60_000, 'iteration 4');

    const killedAt = Date.now();
    await stack.redis.kill('SIGKILL');
    // the producer fails fast while Redis is down (no hang, a typed error)
    await expect(stack.client.get(jobId)).rejects.toBeInstanceOf(RedisUnavailableError);
    await new Promise((r) => setTimeout(r, 1500)); // the worker keeps iterating meanwhile; its Redis writes queue up
    const restartAt = Date.now();
    await stack.redis.restart();
    // (the worker keeps computing meanwhile: its Redis writes wait in ioredis' offline queue)

    // the producer reconnects by itself (same client object)
    await until(async () => stack.client.get(jobId).catch(() => null), 20_000, 'the producer to reconnect');
    const result = await stack.client.wait(jobId, { timeoutMs: 90_000 });
    expect(result.iterations).toBe(SPEC.maxIter);

    // exactly once: one completed job, one result in the model's history, one set of outputs, the uninterrupted bytes
    await expectCompletedOnce(stack, { jobId, output: 's3://out/rr', model: 'rr-model', path, spec: SPEC, engine: ENGINE });

    // the iteration stream, raw: every iteration 1..N, repeats only after a resume point
    const { raw, missing, strayRepeats, extra } = await iterationStreamDefects(stack, jobId, SPEC.maxIter, result.resumedFrom?.iteration);
    expect({ missing, strayRepeats, extra }, `raw stream ${raw.join(',')}\n${worker.output().slice(-3000)}`).toEqual({ missing: [], strayRepeats: [], extra: [] });
    const redis = await stack.client.connection();
    const iterations = await readIterations(redis, stack.client.keys, jobId);
    expect(iterations.map((r) => r.iteration)).toEqual(Array.from({ length: SPEC.maxIter }, (_, i) => i + 1));
    expect(iterations.every((r) => Number.isFinite(r.inertia) && r.inertia > 0)).toBe(true);
    if (process.env.KMFLEET_TEST_DEBUG) console.log({ raw: raw.join(','), resumedFrom: result.resumedFrom, log: worker.output().split('\n').filter((l) => /redis|lock|resum/i.test(l)).slice(0, 8) });
    expect(worker.output()).toMatch(/redis connection error/);
    // the outage really was mid-job: iterations were logged before the crash and after the restart (while Redis is
    // down the worker waits on its per-iteration Redis writes, queued offline, and carries on once they go through)
    const times = worker.output().split('\n').filter((l) => l.includes('"msg":"iteration"')).map((l) => (JSON.parse(l) as { time: number }).time);
    expect(times.filter((t) => t < killedAt).length).toBeGreaterThanOrEqual(3);
    expect(times.filter((t) => t > restartAt).length).toBeGreaterThan(0);
    expect(times.length).toBeGreaterThanOrEqual(SPEC.maxIter);
  });
});
