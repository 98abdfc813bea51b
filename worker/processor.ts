/**
 * The BullMQ processor: one attempt of one job, DESIGN.md "The path of one job" steps 1–6.
 *
 *   1. validate   parseJobSpec again (the worker's limits), cancel check
 *   2. open       (job-open.ts) claim the job's writes (fencing) ∥ output bucket check ∥ S3RowSource: one ranged GET of
 *                 the header; dataset limits; the local cache (KMFLEET_CACHE_DIR), or for datasets up to 1 GiB the
 *                 memory cache, prefetching as soon as the header is read (downloaded once for k-means++ and every
 *                 pass; k-means++'s uniform sample touches every block, so on that init the first pass starts once
 *                 the download is complete; random / given / previous init and resumes overlap it)
 *   3. start      the newest checkpoint matching spec hash + dataset ETag, else init (kmeans++ | random | given), whose
 *                 rows (k-means++'s sample) are read while the engine opens
 *   4. iterate    runKmeans; after each iteration: iteration stream (fenced by the lock) + progress → Redis, sent
 *                 beside the next pass; checkpoint → S3 (fenced) when the pacer says so (every checkpointEvery
 *                 iterations, at most one per KMFLEET_CHECKPOINT_MIN_INTERVAL_MS)
 *   5. finish     into this attempt's staging prefix: centroids.npy (beside the final assign pass), assignments.npy
 *                 (multipart), [distances.npy]; then the commit (outputs/writer.ts): the commit point in Redis (a
 *                 cancel before it wins, one after it is refused), the files copied into place, summary.json LAST
 *   6. record     the JobResult: BullMQ return value + the model's result history; the engine is closed (and its GPU
 *                 given back) once BullMQ has recorded the job's end (engine-releases.ts)
 *
 * Outcomes: user problems (bad spec, bad or missing dataset, k > rows…) → UnrecoverableError naming the problem, no
 * retry, no outputs. Cancel (from any process, producer/cancel.ts), up to the commit point, uploads included →
 * UnrecoverableError("cancelled"). Preemption
 * (SIGTERM, `preempt` aborted) → stop at a chunk boundary, checkpoint, job.moveToWait(token) + WaitingError: the job is
 * back in the queue and attemptsMade is unchanged. Lost lock (another worker has the job) → stop at the next chunk,
 * write nothing. Anything else is thrown as is and BullMQ retries it (attempts and backoff: the producer's job options).
 */
import type { Job } from 'bullmq';
import * as native from '../native/index.js';
import type { CancelListener } from './cancel-listener.js';
import type { JobData } from '../producer/job-data.js';
import type { RedisClient } from '../producer/job-state.js';
import type { Keys } from '../producer/keys.js';
import type { JobResult } from '../producer/results.js';
import type { WorkerConfig } from './config.js';
import type { DevicePool } from './device-pool.js';
import type { EngineReleases } from './engine-releases.js';
import { JobAttempt } from './job-attempt.js';
import type { OpenEngine } from './job-engine.js';
import type { LockLossRegistry } from './lock-loss.js';
import type { Logger } from './logger.js';
import type { FleetMetrics } from './metrics/index.js';
import type { S3Handle } from './s3/client.js';
import { jobSpan, phaseSpan } from './tracing.js';

export type { OpenEngine };

export interface ProcessorDeps {
  config: WorkerConfig;
  /** a non-blocking connection for our own Redis writes */
  redis: RedisClient;
  keys: Keys;
  s3: S3Handle;
  logger: Logger;
  cancels: CancelListener;
  /** aborted when this process must stop (SIGTERM): running jobs checkpoint and go back to the queue */
  preempt: AbortSignal;
  metrics?: FleetMetrics;
  openEngine?: OpenEngine;
  /** aborted for a job whose BullMQ lock could not be renewed (worker.ts wires 'lockRenewalFailed') */
  lockLoss?: LockLossRegistry;
  /** GPUs of this process: each running job takes its own */
  devices?: DevicePool;
  /**
   * Closes a finished job's engine (and gives its GPU back) after BullMQ recorded the job's end rather than before
   * (worker.ts wires its events); without it the engine is closed as the processor returns.
   */
  releases?: EngineReleases;
}

type Processor = (job: Job<JobData, JobResult>, token?: string, signal?: AbortSignal) => Promise<JobResult>;

export function createProcessor(deps: ProcessorDeps): Processor {
  const openEngine: OpenEngine = deps.openEngine ?? ((o) => native.Engine.open(o));
  // Three declared parameters: BullMQ passes its AbortSignal (worker.cancelJob) only to processors that take it.
  return async (job, token, bullSignal) => runJob(new JobAttempt(deps, openEngine, job, token, bullSignal));
}

/** The steps of one attempt (job-attempt.ts), each a span (tracing.ts); on failure, the error its outcome calls for. */
function runJob(attempt: JobAttempt): Promise<JobResult> {
  return jobSpan(attempt.jobId, attempt.attempt, async (setOutcome) => {
    try {
      attempt.validate();
      await phaseSpan('open', () => attempt.open());
      const start = await phaseSpan('init', () => attempt.start());
      const { result, centroidsUpload } = await phaseSpan('iterate', () => attempt.iterate(start));
      const jobResult = await phaseSpan('outputs', () => attempt.finish(start, result, centroidsUpload));
      await phaseSpan('record', () => attempt.record(jobResult, result));
      return jobResult;
    } catch (err) {
      throw await attempt.settle(err);
    } finally {
      await attempt.release();
      setOutcome(attempt.outcome);
    }
  });
}
