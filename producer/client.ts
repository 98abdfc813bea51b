/**
 * KmfleetClient: the producer SDK. Enqueue validated jobs (idempotent by job id), look at them, wait for
 * them, cancel them from any process, schedule recurring ones, and read a model's result history.
 *
 *   const km = new KmfleetClient();                       // REDIS_URL, prefix `kmfleet`, queue `jobs`
 *   try {
 *     const { id } = await km.enqueue({ dataset: { uri: 's3://b/x.npy' }, k: 64, output: 's3://b/out' }, { jobId: 'nightly-42' });
 *     const result = await km.wait(id, { onProgress: (p) => console.log(p.iteration, p.inertia) });  // p is never null
 *   } finally {
 *     await km.close();                                   // else its connections keep the process alive
 *   }
 *
 * Producers fail fast: no offline queue and a short connect timeout, so a down Redis is one clear
 * RedisUnavailableError instead of a hang.
 */
import { randomUUID } from 'node:crypto';
import { Queue, type Job, type JobsOptions, type JobType } from 'bullmq';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { cancelRequested, CANCEL_REASON, clearCancel, requestCancel } from './cancel.js';
import {
  checkJobId,
  checkPriority,
  checkScheduleName,
  DEFAULT_JOB_OPTIONS,
  templateOptions,
  type CancelResult,
  type EnqueueOptions,
  type JobHandle,
  type JobInfo,
  type JobState,
  type KmfleetClientOptions,
  type ListOptions,
  type ProgressUpdate,
  type PromoteResult,
  type RemoveResult,
  type RetryResult,
  type WaitOptions,
} from './client-options.js';
import { connectionFromEnv, describeConnection, parseRedisUrl, type RedisConnectionOptions } from './connection.js';
import { ArgumentError } from './errors/index.js';
import { JOB_NAME, type JobData } from './job-data.js';
import { clearJobState, type RedisClient } from './job-state.js';
import { keyspace, type Keys } from './keys.js';
import { JobEvents } from './job-events.js';
import { followProgress, waitForJob, type WaitContext } from './job-wait.js';
import { resolveLimits, type Limits } from './limits.js';
import { asJobProgress } from './progress.js';
import { toRedisUnavailable } from './redis-errors.js';
import { clientConnectionOptions, createRedisClient } from './redis-factory.js';
import { readHistory, readLatest, readModels, type JobResult } from './results.js';
import { normalizeScheduleSpec, parseRepeat, toScheduleInfo, type RepeatInput, type ScheduleInfo } from './schedule.js';
import { parseJobSpec, specHash, type JobSpecInput } from './spec.js';
import { queueTelemetry, withSpan } from './telemetry.js';

export * from './client-options.js';

/** KEYS: BullMQ job hash, then the per-job state keys → deletes them if the job does not exist. */
const CLEAR_IF_NO_JOB = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
`;

/** The states list() reads by default. */
const LISTED_STATES: readonly JobState[] = ['active', 'waiting', 'delayed', 'failed', 'completed'];

async function stateOf(job: Job): Promise<JobState> {
  const state = await job.getState();
  return state === 'prioritized' ? 'waiting' : ((state ?? 'unknown') as JobState);
}

function jobInfo(job: Job, state: JobState, cancel: string | null): JobInfo {
  const data = job.data as Partial<JobData> | undefined;
  return {
    id: job.id!,
    state: state ?? 'unknown',
    progress: asJobProgress(job.progress),
    result: state === 'completed' ? ((job.returnvalue as JobResult | null) ?? null) : null,
    failedReason: job.failedReason || null,
    attemptsMade: job.attemptsMade ?? 0,
    cancelRequested: cancel,
    spec: data?.spec ?? null,
    scheduler: data?.scheduler ?? null,
    timestamps: { createdAt: job.timestamp, startedAt: job.processedOn ?? null, finishedAt: job.finishedOn ?? null },
  };
}

export class KmfleetClient {
  readonly keys: Keys;
  readonly limits: Limits;
  /** Safe to print: no password. */
  readonly where: string;
  private readonly redis: RedisClient;
  private readonly ownsRedis: boolean;
  private queueInstance: Queue | undefined;
  private events: JobEvents | undefined;
  private ready: Promise<void> | undefined;
  private lastError: Error | undefined;
  private readonly jobOptions: JobsOptions;

  constructor(opts: KmfleetClientOptions = {}) {
    this.keys = keyspace({ prefix: opts.prefix, queue: opts.queue });
    this.limits = resolveLimits(opts.limits);
    this.jobOptions = { ...DEFAULT_JOB_OPTIONS, ...opts.jobOptions };
    if (opts.connection instanceof Redis || opts.connection instanceof Cluster) {
      this.redis = opts.connection;
      this.ownsRedis = false;
      this.where = describeConnection(clientConnectionOptions(this.redis));
    } else {
      const base: RedisConnectionOptions | RedisOptions =
        typeof opts.connection === 'string'
          ? parseRedisUrl(opts.connection)
          : (opts.connection ?? connectionFromEnv());
      this.where = describeConnection(base as RedisConnectionOptions);
      this.redis = createRedisClient(base, 'producer', { connectTimeoutMs: opts.connectTimeoutMs });
      this.ownsRedis = true;
    }
    // Without a listener ioredis prints every reconnect error; keep the last one for messages instead.
    this.redis.on('error', (err: Error) => (this.lastError = err));
  }

  /** Connects (once); rejects with RedisUnavailableError when Redis can't be reached. */
  connect(): Promise<void> {
    this.ready ??= this.doConnect();
    return this.ready;
  }

  private async doConnect(): Promise<void> {
    this.lastError = undefined;
    try {
      const status = this.redis.status;
      // A connection of ours that an earlier connect() gave up on is left 'reconnecting' or 'end' by disconnect(), and
      // emits nothing more: connecting again is the retry (waiting for its 'ready' would wait, with nothing left to
      // keep the process alive, for an event that never comes).
      const idle = status === 'wait' || (this.ownsRedis && !['ready', 'connecting', 'connect'].includes(status));
      if (idle) await this.redis.connect();
      else if (status === 'end') throw this.lastError ?? new Error('Connection is closed.');
      else if (status !== 'ready') {
        // A caller-owned connection that is (re)connecting: wait for it, unless it gives up.
        await new Promise<void>((resolve, reject) => {
          const onReady = () => (this.redis.off('end', onEnd), resolve());
          const onEnd = () => (this.redis.off('ready', onReady), reject(this.lastError ?? new Error('Connection is closed.')));
          this.redis.once('ready', onReady);
          this.redis.once('end', onEnd);
        });
      }
    } catch (rejection) {
      // connect() rejects with a bare "Connection is closed."; the 'error' event had the reason.
      const err = this.lastError ?? rejection;
      this.ready = undefined;
      if (this.ownsRedis) this.redis.disconnect(); // stop background reconnects: this process fails fast
      throw toRedisUnavailable(err, this.where, true);
    }
  }

  /** The BullMQ queue (shares this client's connection). */
  async queue(): Promise<Queue> {
    await this.connect();
    if (!this.queueInstance) {
      this.queueInstance = new Queue(this.keys.queueName, {
        connection: this.redis,
        prefix: this.keys.bullPrefix,
        defaultJobOptions: this.jobOptions,
        telemetry: queueTelemetry(), // with tracing on: the enqueue's trace goes with the job to the worker
      });
      // BullMQ re-emits connection errors (and prints them when nobody listens); callers get them as
      // RedisUnavailableError from the failing call instead.
      this.queueInstance.on('error', (err: Error) => (this.lastError = err));
    }
    return this.queueInstance;
  }

  /** The client's ioredis connection (connected): a Redis, or a Cluster in cluster mode. */
  async connection(): Promise<RedisClient> {
    await this.connect();
    return this.redis;
  }

  private async guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw toRedisUnavailable(err, this.where);
    }
  }

  /** Validates the spec (SpecValidationError naming every bad field) and adds the job once per jobId. */
  async enqueue(specInput: JobSpecInput | unknown, opts: EnqueueOptions = {}): Promise<JobHandle> {
    const spec = parseJobSpec(specInput, this.limits);
    const jobId = opts.jobId ?? randomUUID();
    checkJobId(jobId);
    const priority = checkPriority(opts.priority);
    if (opts.delayMs !== undefined && !(Number.isSafeInteger(opts.delayMs) && opts.delayMs >= 0)) {
      throw new ArgumentError(`delay must be a non-negative integer of ms (got ${opts.delayMs})`);
    }
    const hash = specHash(spec);
    const enqueueId = randomUUID();
    const data: JobData = { spec, specHash: hash, enqueuedAt: Date.now(), enqueueId };
    return withSpan('kmfleet.enqueue', { 'kmfleet.job.id': jobId }, () =>
      this.guard(async () => {
        const queue = await this.queue();
        // An id that is free again (its job was cancelled while waiting, or expired) may still have per-job
        // state: a stale cancel flag would cancel the new job at once, old iterations would mix with new ones.
        // Atomic with the existence check, so a concurrent enqueue that already created the job is never touched.
        await this.redis.eval(
          CLEAR_IF_NO_JOB, 4, queue.toKey(jobId),
          this.keys.iterations(jobId), this.keys.checkpoint(jobId), this.keys.cancel(jobId),
        );
        // BullMQ's add is a no-op for an existing jobId; reading the job back tells which add won.
        await queue.add(JOB_NAME, data, { jobId, priority, ...(opts.delayMs ? { delay: opts.delayMs } : {}) });
        const stored = await queue.getJob(jobId);
        const storedData = stored?.data as JobData | undefined;
        const created = !storedData || storedData.enqueueId === enqueueId;
        return { id: jobId, created, sameSpec: created || storedData?.specHash === hash, specHash: hash };
      }),
    );
  }

  /** Everything known about a job, or null if there is no such job. */
  async get(jobId: string): Promise<JobInfo | null> {
    return this.guard(async () => {
      const queue = await this.queue();
      let job = await queue.getJob(jobId);
      if (!job) return null;
      const state = await stateOf(job);
      // The hash was read before the state: a job that just finished needs a fresh read for its result.
      if (state === 'completed' || state === 'failed') job = (await queue.getJob(jobId)) ?? job;
      return jobInfo(job, state, await cancelRequested(this.redis, this.keys, jobId));
    });
  }

  /**
   * Resolves with the job's result when it completes; rejects with JobFailedError, JobCancelledError,
   * JobNotFoundError, WaitTimeoutError (its timeoutMs passed) or an AbortError (its signal). Woken by the queue's
   * events (BullMQ QueueEvents) and re-reads the job on each, with a slow poll as a safety net, so nothing is missed
   * however late it starts listening (a job already finished resolves at once). `onProgress` gets every new progress
   * report — before the worker's first one, a `queued` report (iteration 0, nothing measured) — never null.
   */
  async wait(jobId: string, options: WaitOptions = {}): Promise<JobResult> {
    return waitForJob(this.waitContext, jobId, options);
  }

  /**
   * The job's progress as an async iterator: every new report (a `queued` one first if no worker has reported yet),
   * each with the job's state. Ends when the job completes; throws what wait() throws when it fails, is cancelled,
   * or the signal aborts. Leaving the loop early stops listening.
   *
   *   for await (const p of client.progress(id)) console.log(p.state, p.iteration, p.inertia);
   */
  progress(jobId: string, options: Omit<WaitOptions, 'onProgress'> = {}): AsyncGenerator<ProgressUpdate, void, undefined> {
    return followProgress((o) => this.wait(jobId, o), options);
  }

  private readonly waitContext: WaitContext = {
    get: (jobId) => this.get(jobId),
    cancelRequested: (jobId) => this.guard(() => cancelRequested(this.redis, this.keys, jobId)),
    events: () => this.jobEvents(),
  };

  /**
   * The shared event stream of this client's queue, once it is read — or, if it is not within a second (Redis away for
   * a moment), as it is: its waiters poll at the fast pace until it is live. Null where it can't start: waits poll.
   */
  private async jobEvents(): Promise<JobEvents | null> {
    await this.connect();
    this.events ??= new JobEvents(this.redis, this.keys);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([this.events.whenReady(), new Promise<void>((resolve) => (timer = setTimeout(resolve, 1000)))]);
      return this.events;
    } catch {
      return null;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Jobs of the queue, state by state in the order of `states` (default active, waiting, delayed, failed, completed):
   * waiting ones in the order they will run, delayed ones soonest first, finished ones latest first; at most `limit`
   * in all. Without results (each `result` is null; get() has it), so that a long list stays cheap.
   */
  async list(opts: ListOptions = {}): Promise<JobInfo[]> {
    const states = opts.states ?? LISTED_STATES;
    for (const s of states) {
      if (!LISTED_STATES.includes(s)) throw new ArgumentError(`cannot list jobs in state ${JSON.stringify(s)} (one of ${LISTED_STATES.join(', ')})`);
    }
    const limit = opts.limit ?? 50;
    if (!Number.isSafeInteger(limit) || limit < 1) throw new ArgumentError(`limit must be a positive integer (got ${limit})`);
    return this.guard(async () => {
      const queue = await this.queue();
      const found: { job: Job; state: JobState }[] = [];
      for (const state of states) {
        const left = limit - found.length;
        if (left <= 0) break;
        // BullMQ runs its wait list before its prioritized set: that is the order they will run in
        const types: JobType[] = state === 'waiting' ? ['waiting', 'prioritized'] : [state as JobType];
        const asc = state === 'waiting' || state === 'delayed';
        const jobs = (await queue.getJobs(types, 0, left - 1, asc)).filter((j): j is Job => Boolean(j?.id));
        for (const job of jobs.slice(0, left)) found.push({ job, state });
      }
      const flags = found.length ? await this.redis.mget(found.map(({ job }) => this.keys.cancel(job.id!))) : [];
      return found.map(({ job, state }, i) => ({ ...jobInfo(job, state, flags[i]), result: null }));
    });
  }

  /**
   * Runs a failed job again (a cancelled one included: its cancel flag is cleared), from its last checkpoint if it
   * has one, with its attempts counted afresh. Jobs in other states are left alone ('not-failed').
   */
  async retry(jobId: string): Promise<RetryResult> {
    return this.guard(async () => {
      const queue = await this.queue();
      const job = await queue.getJob(jobId);
      if (!job) return { id: jobId, outcome: 'not-found', state: null };
      const state = await stateOf(job);
      if (state !== 'failed') return { id: jobId, outcome: 'not-failed', state };
      await clearCancel(this.redis, this.keys, jobId);
      await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
      return { id: jobId, outcome: 'retried', state };
    });
  }

  /**
   * Removes a job that is not running, and its per-job state in Redis (iteration history, checkpoint record, cancel
   * flag); its outputs in S3 and its entry in a model's result history stay. A running job is left alone ('active':
   * cancel it first). The next run of a schedule can't be removed (unschedule, or cancel that run).
   */
  async remove(jobId: string): Promise<RemoveResult> {
    return this.guard(async () => {
      const queue = await this.queue();
      const job = await queue.getJob(jobId);
      if (!job) return { id: jobId, outcome: 'not-found', state: null };
      const state = await stateOf(job);
      if (state === 'active') return { id: jobId, outcome: 'active', state };
      if (job.repeatJobKey && state !== 'completed' && state !== 'failed') {
        throw new ArgumentError(`job ${jobId} is the next run of a schedule: unschedule it, or cancel this run`);
      }
      let removed = 0;
      try {
        removed = await queue.remove(jobId);
      } catch (err) {
        if (!/locked/i.test((err as Error).message)) throw err;
      }
      if (removed !== 1) return { id: jobId, outcome: 'active', state: 'active' }; // a worker took it meanwhile
      await clearJobState(this.redis, this.keys, jobId);
      return { id: jobId, outcome: 'removed', state };
    });
  }

  /**
   * Runs a delayed job now: a retry waiting out its back-off, a job enqueued with `delayMs`, a schedule's next run
   * (the schedule goes on from it). Jobs in other states are left alone ('not-delayed').
   */
  async promote(jobId: string): Promise<PromoteResult> {
    return this.guard(async () => {
      const job = await (await this.queue()).getJob(jobId);
      if (!job) return { id: jobId, outcome: 'not-found', state: null };
      const state = await stateOf(job);
      if (state !== 'delayed') return { id: jobId, outcome: 'not-delayed', state };
      try {
        await job.promote();
      } catch (err) {
        // it became due (or was removed) between the read and the promote
        if (!/not in the delayed state|missing/i.test((err as Error).message)) throw err;
        return { id: jobId, outcome: 'not-delayed', state: await stateOf(job) };
      }
      return { id: jobId, outcome: 'promoted', state };
    });
  }

  /**
   * Cancels a job from any process. The cancel flag is set and published first (producer/cancel.ts);
   * then a job that is not running yet is removed from the queue ('removed'), a running one is left to
   * its worker, which stops at the next chunk boundary and fails it with reason "cancelled" ('signalled').
   * A job whose worker has passed its commit point is not cancelled: it completes ('committed').
   * A schedule's upcoming job is 'signalled' too (removing it would stop the schedule): the worker that
   * takes it fails it as cancelled at once.
   */
  async cancel(jobId: string, reason = CANCEL_REASON): Promise<CancelResult> {
    return this.guard(async () => {
      const queue = await this.queue();
      const job = await queue.getJob(jobId);
      if (!job) return { id: jobId, outcome: 'not-found', state: null };
      const state = await stateOf(job);
      if (state === 'completed' || state === 'failed') return { id: jobId, outcome: 'already-finished', state };
      if ((await requestCancel(this.redis, this.keys, jobId, reason)) === 'committed') return { id: jobId, outcome: 'committed', state };
      if (state === 'active') return { id: jobId, outcome: 'signalled', state };
      // A job scheduler's next job can't be removed (BullMQ refuses: the schedule would stop); its worker sees
      // the flag when it starts the job and fails it as cancelled at once, and the schedule goes on.
      if (job.repeatJobKey) return { id: jobId, outcome: 'signalled', state };
      // Not locked → removed. Locked (a worker took it meanwhile) → that worker sees the flag when it starts.
      let removed = 0;
      try {
        removed = await queue.remove(jobId);
      } catch (err) {
        if (!/job scheduler|locked/i.test((err as Error).message)) throw err;
      }
      return { id: jobId, outcome: removed === 1 ? 'removed' : 'signalled', state };
    });
  }

  /**
   * Creates or replaces a recurring job (BullMQ job scheduler with id = name). The spec's `init`
   * defaults to 'previous' and its `name` to the schedule name, so each run warm-starts from the last.
   */
  async schedule(name: string, repeat: RepeatInput, specInput: JobSpecInput | Record<string, unknown>, opts: { priority?: number } = {}): Promise<ScheduleInfo> {
    checkScheduleName(name);
    const repeatOpts = parseRepeat(repeat);
    const spec = parseJobSpec(normalizeScheduleSpec(name, specInput), this.limits);
    const priority = checkPriority(opts.priority);
    const data: JobData = { spec, specHash: specHash(spec), scheduler: name };
    return this.guard(async () => {
      const queue = await this.queue();
      try {
        await queue.upsertJobScheduler(name, repeatOpts, {
          name: JOB_NAME,
          data,
          opts: { ...templateOptions(this.jobOptions), priority },
        });
      } catch (err) {
        // cron-parser's complaints (BullMQ parses the pattern when it computes the next run)
        if (/pattern|cron|invalid|explicit|constraint|got value/i.test((err as Error).message)) {
          throw new ArgumentError(`invalid schedule for ${name}: ${(err as Error).message}`);
        }
        throw err;
      }
      const s = await queue.getJobScheduler(name);
      if (!s) throw new Error(`schedule ${name} vanished right after it was created`);
      return toScheduleInfo(s);
    });
  }

  /** Removes a schedule; false if there was none. Jobs it already made are not touched. */
  async unschedule(name: string): Promise<boolean> {
    checkScheduleName(name);
    return this.guard(async () => (await this.queue()).removeJobScheduler(name));
  }

  async schedules(): Promise<ScheduleInfo[]> {
    return this.guard(async () => {
      const list = await (await this.queue()).getJobSchedulers(0, -1, true);
      return list.map(toScheduleInfo).sort((a, b) => a.name.localeCompare(b.name));
    });
  }

  /** Results of a named model, newest first. */
  async history(name: string, opts: { limit?: number } = {}): Promise<JobResult[]> {
    checkScheduleName(name, 'model name');
    return this.guard(async () => readHistory(await this.connection(), this.keys, name, opts));
  }

  async latest(name: string): Promise<JobResult | null> {
    checkScheduleName(name, 'model name');
    return this.guard(async () => readLatest(await this.connection(), this.keys, name));
  }

  async models(): Promise<string[]> {
    return this.guard(async () => readModels(await this.connection(), this.keys));
  }

  async close(): Promise<void> {
    const q = this.queueInstance;
    this.queueInstance = undefined;
    const events = this.events;
    this.events = undefined;
    if (events) await events.close();
    if (q) await q.close().catch(() => undefined);
    if (this.ownsRedis) {
      if (this.redis.status === 'ready') await this.redis.quit().catch(() => this.redis.disconnect());
      else if (this.redis.status !== 'end' && this.redis.status !== 'wait') this.redis.disconnect();
    }
  }
}
