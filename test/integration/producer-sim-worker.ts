/**
 * A tiny REAL BullMQ worker for the producer tests: it speaks the contract the real worker speaks
 * (re-validates the spec, reports JobProgress, appends iterations, watches the cancel flag through
 * CancelListener, fails cancelled jobs with UnrecoverableError('cancelled'), records results for named
 * models, warm-starts `init: 'previous'` from readLatest) but "computes" nothing: each iteration sleeps.
 */
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { parseJobSpec, specHash, type JobResult } from '../../producer/index.js';
import { CANCEL_REASON } from '../../producer/cancel.js';
import { workerRedisOptions } from '../../producer/connection.js';
import type { JobData } from '../../producer/job-data.js';
import { appendIteration } from '../../producer/job-state.js';
import type { Keys } from '../../producer/keys.js';
import { makeProgress } from '../../producer/progress.js';
import { readLatest, recordResult } from '../../producer/results.js';
import { CancelListener } from '../../worker/cancel-listener.js';

export interface SimOptions {
  /** ms per simulated iteration (default 20). */
  iterationMs?: number;
  /** Iterations to run before "converging" (default: the spec's maxIter). */
  iterations?: number;
  /** Throw this message on the given attempt numbers (1-based). */
  failWith?: { message: string; attempts: number[]; unrecoverable?: boolean };
  rows?: number;
  /** Jobs at once (default 2). */
  concurrency?: number;
}

export interface SimWorker {
  worker: Worker;
  /** Jobs this worker started, in order (id, data). */
  started: { id: string; data: JobData }[];
  /** Last iteration each job reached. */
  reached: Map<string, number>;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startSimWorker(connection: object, keys: Keys, sim: SimOptions = {}): Promise<SimWorker> {
  const redis = new Redis(workerRedisOptions(connection));
  const cancels = new CancelListener(redis, keys, { pollMs: 250 });
  await cancels.start();
  const started: SimWorker['started'] = [];
  const reached = new Map<string, number>();
  const rows = sim.rows ?? 1000;

  const processor = async (job: Job<JobData, JobResult>): Promise<JobResult> => {
    const jobId = job.id!;
    started.push({ id: jobId, data: job.data });
    let spec;
    try {
      spec = parseJobSpec(job.data.spec);
    } catch (e) {
      throw new UnrecoverableError((e as Error).message);
    }
    const watch = cancels.watch(jobId);
    try {
      if (sim.failWith && sim.failWith.attempts.includes(job.attemptsMade + 1)) {
        throw sim.failWith.unrecoverable ? new UnrecoverableError(sim.failWith.message) : new Error(sim.failWith.message);
      }
      const startedAt = Date.now();
      let initFrom: string | undefined;
      if (spec.init === 'previous' && spec.name) initFrom = (await readLatest(redis, keys, spec.name))?.outputs.centroids;
      const total = Math.min(sim.iterations ?? spec.maxIter, spec.maxIter);
      let inertia = 1000;
      for (let it = 1; it <= total; it++) {
        await sleep(sim.iterationMs ?? 20);
        // A chunk boundary: the real worker checks here (and the engine's cancel() stops a running pass).
        if (watch.signal.aborted) throw new UnrecoverableError(CANCEL_REASON);
        inertia *= 0.9;
        const rec = { iteration: it, inertia, reassigned: Math.round(rows / (it + 1)), shift: 1 / it, ms: sim.iterationMs ?? 20 };
        await appendIteration(redis, keys, jobId, rec);
        await job.updateProgress(makeProgress({ phase: 'iterating', iteration: it, maxIter: spec.maxIter, rows, last: rec, msPerIteration: rec.ms }));
        reached.set(jobId, it);
      }
      const prefix = `${spec.output}/${jobId}`;
      const result: JobResult = {
        jobId,
        ...(spec.name ? { name: spec.name } : {}),
        spec,
        specHash: specHash(spec),
        dataset: { uri: spec.dataset.uri, etag: '"sim"', format: spec.dataset.format, rows, dims: spec.dataset.dims ?? 4 },
        k: spec.k,
        iterations: total,
        converged: total < spec.maxIter,
        stopReason: total < spec.maxIter ? 'tol' : 'maxIter',
        inertia,
        emptyClustersReseeded: 0,
        backend: 'cpu',
        device: 'simulated',
        precision: 'fp32',
        outputs: { prefix, centroids: `${prefix}/centroids.npy`, assignments: `${prefix}/assignments.npy`, summary: `${prefix}/summary.json` },
        timings: { totalMs: Date.now() - startedAt },
        ...(initFrom ? { initFrom } : {}),
        startedAt,
        finishedAt: Date.now(),
      };
      if (spec.name) await recordResult(redis, keys, spec.name, result);
      return result;
    } finally {
      watch.dispose();
    }
  };

  const worker = new Worker<JobData, JobResult>(keys.queueName, processor, {
    connection: workerRedisOptions(connection),
    prefix: keys.bullPrefix,
    concurrency: sim.concurrency ?? 2,
  });
  worker.on('error', () => undefined);
  await worker.waitUntilReady();
  return {
    worker,
    started,
    reached,
    async close() {
      await worker.close();
      await cancels.close();
      redis.disconnect();
    },
  };
}
