/**
 * The options, answers and argument checks of KmfleetClient (client.ts), apart from its behaviour.
 */
import type { JobsOptions } from 'bullmq';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type { RedisConnectionOptions } from './connection.js';
import { ArgumentError } from './errors/job-errors.js';
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
/**
 * The priority of a job enqueued without one. BullMQ takes jobs without a priority before every prioritized job,
 * which would run a job given priority 1 ("highest") after them; so every kmfleet job has one.
 */
export const DEFAULT_PRIORITY = 1000;

export interface EnqueueOptions {
  /** Idempotency key: enqueueing the same id again returns the existing job. Default: a random UUID. */
  jobId?: string;
  /** 1 (highest) .. 2,097,152; lower runs first, FIFO among equals. 0 or absent: DEFAULT_PRIORITY (1000). */
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

/**
 * A job's state as BullMQ keeps it, except that `waiting` covers BullMQ's `prioritized` too: every kmfleet job has a
 * priority (DEFAULT_PRIORITY when none is given), so "prioritized" would only mean "waiting for a worker".
 */
export type JobState = 'waiting' | 'delayed' | 'active' | 'completed' | 'failed' | 'waiting-children' | 'unknown';

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
  /**
   * Called whenever the progress or the state changes, with the worker's last report — or, before its first, a
   * `queued` one (iteration 0, nothing measured): never null.
   */
  onProgress?: (progress: JobProgress, state: JobState) => void;
  /** Give up after this many ms (WaitTimeoutError; the job goes on). Default: no limit. */
  timeoutMs?: number;
  /** Same as timeoutMs. */
  timeout?: number;
  /**
   * How often the job is re-read when no queue event came: a safety net for events lost in a reconnect (default
   * 1000 ms; at most 200 ms while the event stream is down).
   */
  pollMs?: number;
  /** Aborts the wait (not the job): it rejects with an AbortError whose cause is the signal's reason. */
  signal?: AbortSignal;
}

/**
 * 'committed': the job's worker had passed its commit point (its outputs are being put in place): it completes, and
 * nothing was cancelled.
 */
export type CancelOutcome = 'removed' | 'signalled' | 'committed' | 'already-finished' | 'not-found';

/** One item of KmfleetClient.progress(): the report and the job's state when it was read. */
export type ProgressUpdate = JobProgress & { state: JobState };

export interface ListOptions {
  /** Which states, in this order (default: active, waiting, delayed, failed, completed). */
  states?: JobState[];
  /** At most this many jobs (default 50). */
  limit?: number;
}

export interface RetryResult {
  id: string;
  /** 'retried': back in the queue; 'not-failed': only failed (or cancelled) jobs are retried. */
  outcome: 'retried' | 'not-failed' | 'not-found';
  state: JobState | null;
}

export interface RemoveResult {
  id: string;
  /** 'active': running, so not removed (cancel it first). */
  outcome: 'removed' | 'active' | 'not-found';
  state: JobState | null;
}

export interface PromoteResult {
  id: string;
  /** 'promoted': a delayed job (a retry's back-off, a later start) moved to the queue to run now; 'not-delayed': left alone. */
  outcome: 'promoted' | 'not-delayed' | 'not-found';
  state: JobState | null;
}

export interface CancelResult {
  id: string;
  outcome: CancelOutcome;
  /** The state seen before cancelling. */
  state: JobState | null;
}

export function checkJobId(jobId: string): void {
  if (typeof jobId !== 'string' || !JOB_ID_RE.test(jobId)) {
    throw new ArgumentError(`job id ${JSON.stringify(jobId)} must be ${JOB_ID_RULE}`);
  }
}

/** The priority a job gets: the given one, or DEFAULT_PRIORITY for 0 or none. */
export function checkPriority(priority: number | undefined): number {
  if (priority === undefined || priority === 0) return DEFAULT_PRIORITY;
  if (!Number.isSafeInteger(priority) || priority < 0 || priority > MAX_PRIORITY) {
    throw new ArgumentError(`priority must be an integer from 0 to ${MAX_PRIORITY} (1 = highest; got ${priority})`);
  }
  return priority;
}

export function checkScheduleName(name: string, what = 'schedule name'): void {
  if (typeof name !== 'string' || !MODEL_NAME_RE.test(name)) {
    throw new ArgumentError(`${what} ${JSON.stringify(name)} must be 1-128 characters [a-zA-Z0-9._-]`);
  }
}

/** A scheduler's template accepts only some job options (no jobId, no delay). */
export function templateOptions(o: JobsOptions): JobsOptions {
  const { attempts, backoff, removeOnComplete, removeOnFail } = o;
  return { attempts, backoff, removeOnComplete, removeOnFail };
}
