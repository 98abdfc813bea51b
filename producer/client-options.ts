/**
 * The options, answers and argument checks of KmfleetClient (client.ts), apart from its behaviour.
 */
import type { JobsOptions } from 'bullmq';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type { RedisConnectionOptions } from './connection.js';
import { InvalidArgumentError } from './errors/job-errors.js';
import { JOB_ID_RE, JOB_ID_RULE, type JobData } from './job-data.js';
import type { Limits } from './limits.js';
import type { JobProgress } from './progress.js';
import type { JobResult } from './results.js';
import { MODEL_NAME_RE } from './spec.js';

export interface KmfleetClientOptions {
  /**
   * A redis:// or rediss:// URL (one node), connection options (`connectionFromEnv()`; with `cluster`: a Redis
   * Cluster), ioredis options, or an ioredis Redis or Cluster instance (not closed by close()).
   * Default: the environment, REDIS_URL and REDIS_CLUSTER_NODES.
   */
  connection?: string | RedisConnectionOptions | RedisOptions | Redis | Cluster;
  /** BullMQ queue name (default `jobs`). */
  queue?: string;
  /** Key prefix (default `kmfleet`). */
  prefix?: string;
  /** Overrides of the spec limits (else defaults + KMFLEET_MAX_* env). */
  limits?: Partial<Limits>;
  /** Connect timeout in ms (default 5000). */
  connectTimeoutMs?: number;
  /** Merged over DEFAULT_JOB_OPTIONS for every job this client adds. */
  jobOptions?: JobsOptions;
}

/**
 * Retries with backoff for transient failures (a failed S3 read, an OOM on a busy GPU); bad specs and
 * cancels are UnrecoverableError on the worker and never retry. Finished jobs stay visible to get()/wait()
 * for 7 days (completed) / 30 days (failed); model results stay in the history beyond that.
 */
export const DEFAULT_JOB_OPTIONS: JobsOptions = {
  attempts: 3,
  backoff: { type: 'exponential', delay: 10_000 },
  removeOnComplete: { age: 7 * 24 * 3600 },
  removeOnFail: { age: 30 * 24 * 3600 },
};

export const MAX_PRIORITY = 2_097_152;

export interface EnqueueOptions {
  /** Idempotency key: enqueueing the same id again returns the existing job. Default: a random UUID. */
  jobId?: string;
  /** 1 (highest) .. 2,097,152; 0 or absent = no priority (FIFO, ahead of all prioritized jobs). */
  priority?: number;
  /** Start no earlier than this many ms from now. */
  delayMs?: number;
}

export interface JobHandle {
  id: string;
  /** False when a job with this id already existed (nothing new was enqueued). */
  created: boolean;
  /** Whether the existing job's spec hash equals this call's (always true when created). */
  sameSpec: boolean;
  specHash: string;
}

export type JobState =
  | 'waiting' | 'prioritized' | 'delayed' | 'active' | 'completed' | 'failed' | 'waiting-children' | 'unknown';

export interface JobInfo {
  id: string;
  state: JobState;
  progress: JobProgress | null;
  result: JobResult | null;
  failedReason: string | null;
  attemptsMade: number;
  /** The cancel reason when a cancel was requested (the job may still be stopping). */
  cancelRequested: string | null;
  spec: JobData['spec'] | null;
  scheduler: string | null;
  timestamps: { createdAt: number; startedAt: number | null; finishedAt: number | null };
}

export interface WaitOptions {
  /** Called whenever the progress (or state) changes. */
  onProgress?: (progress: JobProgress | null, state: JobState) => void;
  /** Give up after this many ms (WaitTimeoutError; the job goes on). Default: no limit. */
  timeoutMs?: number;
  /** Same as timeoutMs. */
  timeout?: number;
  /** Poll period (default 200 ms). */
  pollMs?: number;
  /** Aborts the wait (not the job). */
  signal?: AbortSignal;
}

/**
 * 'committed': the job's worker had passed its commit point (its outputs are being put in place): it completes, and
 * nothing was cancelled.
 */
export type CancelOutcome = 'removed' | 'signalled' | 'committed' | 'already-finished' | 'not-found';

export interface CancelResult {
  id: string;
  outcome: CancelOutcome;
  /** The state seen before cancelling. */
  state: JobState | null;
}

export function checkJobId(jobId: string): void {
  if (typeof jobId !== 'string' || !JOB_ID_RE.test(jobId)) {
    throw new InvalidArgumentError(`job id ${JSON.stringify(jobId)} must be ${JOB_ID_RULE}`);
  }
}

export function checkPriority(priority: number | undefined): number | undefined {
  if (priority === undefined || priority === 0) return undefined;
  if (!Number.isSafeInteger(priority) || priority < 0 || priority > MAX_PRIORITY) {
    throw new InvalidArgumentError(`priority must be an integer from 0 to ${MAX_PRIORITY} (1 = highest; got ${priority})`);
  }
  return priority;
}

export function checkScheduleName(name: string, what = 'schedule name'): void {
  if (typeof name !== 'string' || !MODEL_NAME_RE.test(name)) {
    throw new InvalidArgumentError(`${what} ${JSON.stringify(name)} must be 1-128 characters [a-zA-Z0-9._-]`);
  }
}

/** A scheduler's template accepts only some job options (no jobId, no delay). */
export function templateOptions(o: JobsOptions): JobsOptions {
  const { attempts, backoff, removeOnComplete, removeOnFail } = o;
  return { attempts, backoff, removeOnComplete, removeOnFail };
}
