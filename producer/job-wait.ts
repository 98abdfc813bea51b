/**
 * Waiting for a job (KmfleetClient.wait) and following its progress (KmfleetClient.progress): woken by the queue's
 * events (job-events.ts), re-reading the job on each, with a slow poll as a safety net for events lost in a reconnect.
 */
import type { JobInfo, ProgressUpdate, WaitOptions } from './client-options.js';
import { isCancelledReason } from './cancel.js';
import { abortError, isAbortError, JobCancelledError, JobFailedError, JobNotFoundError, RedisUnavailableError, WaitTimeoutError } from './errors/index.js';
import type { JobEvents } from './job-events.js';
import { queuedProgress } from './progress.js';
import type { JobResult } from './results.js';

/** What a wait needs of its client. */
export interface WaitContext {
  /** The job, null when there is none; RedisUnavailableError while Redis is away. */
  get(jobId: string): Promise<JobInfo | null>;
  /** The cancel reason when a cancel was requested, else null. */
  cancelRequested(jobId: string): Promise<string | null>;
  /** The queue's event stream, null where it can't start. */
  events(): Promise<JobEvents | null>;
}

/** KmfleetClient.wait: see there. */
export async function waitForJob(ctx: WaitContext, jobId: string, options: WaitOptions = {}): Promise<JobResult> {
  const timeoutMs = options.timeoutMs ?? options.timeout;
  const { signal, onProgress } = options;
  const pollMs = options.pollMs ?? 1000;
  const started = Date.now();
  if (signal?.aborted) throw abortError(signal, `waiting for job ${jobId}`);
  const events = await ctx.events();
  let wake: (() => void) | undefined;
  let woken = false;
  const unsubscribe = events?.onJob(jobId, () => ((woken = true), wake?.()));
  const onAbort = () => wake?.();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    let lastSeen = '';
    let transientSince: number | undefined;
    let reached = false;
    for (;;) {
      woken = false;
      let info: JobInfo | null | undefined; // undefined: not read (Redis is away for a moment)
      try {
        info = await ctx.get(jobId);
        transientSince = undefined;
        reached = true;
      } catch (err) {
        // A blip of Redis (failover, restart) should not end a long wait; a longer outage does, and a Redis never
        // reached (a wrong REDIS_URL) ends it at once.
        if (!(err instanceof RedisUnavailableError) || !reached) throw err;
        transientSince ??= Date.now();
        if (Date.now() - transientSince > 10_000) throw err;
      }
      if (info === null) {
        const reason = await ctx.cancelRequested(jobId);
        if (reason !== null) throw new JobCancelledError(jobId);
        throw new JobNotFoundError(jobId, 'never enqueued, or removed');
      }
      if (info) {
        const progress = info.progress ?? queuedProgress(info.spec?.maxIter ?? 0, info.timestamps.createdAt);
        const seen = JSON.stringify([info.state, progress]);
        if (seen !== lastSeen) {
          lastSeen = seen;
          onProgress?.(progress, info.state);
        }
        if (info.state === 'completed') {
          if (!info.result) throw new JobFailedError(jobId, 'completed without a result', info.attemptsMade);
          return info.result;
        }
        if (info.state === 'failed') {
          if (isCancelledReason(info.failedReason)) throw new JobCancelledError(jobId);
          throw new JobFailedError(jobId, info.failedReason ?? 'unknown reason', info.attemptsMade);
        }
      }
      if (signal?.aborted) throw abortError(signal, `waiting for job ${jobId}`);
      const elapsed = Date.now() - started;
      if (timeoutMs !== undefined && elapsed >= timeoutMs) throw new WaitTimeoutError(jobId, timeoutMs, info?.state ?? 'unknown');
      if (woken) continue; // an event came while the job was being read
      // Without a live event stream (or while it reconnects) the poll is all there is: poll at the fast pace.
      const period = events?.live && info ? pollMs : Math.min(pollMs, 200);
      const left = timeoutMs === undefined ? period : Math.min(period, timeoutMs - elapsed);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.max(1, left));
        wake = () => (clearTimeout(t), resolve());
      });
      wake = undefined;
    }
  } finally {
    unsubscribe?.();
    signal?.removeEventListener('abort', onAbort);
  }
}

/** KmfleetClient.progress: the reports `wait` gives, as an async iterator; leaving it early aborts the wait. */
export async function* followProgress(
  wait: (options: WaitOptions) => Promise<JobResult>,
  options: Omit<WaitOptions, 'onProgress'> = {},
): AsyncGenerator<ProgressUpdate, void, undefined> {
  const stop = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
  const pending: ProgressUpdate[] = [];
  let notify: (() => void) | undefined;
  let finished = false;
  let failure: { err: unknown } | undefined;
  const waiting = wait({
    ...options,
    signal,
    onProgress: (p, state) => (pending.push({ ...p, state }), notify?.()),
  }).then(
    () => undefined,
    (err: unknown) => void (failure = { err }),
  ).finally(() => ((finished = true), notify?.()));
  try {
    for (;;) {
      while (pending.length > 0) yield pending.shift()!;
      if (finished) break;
      await new Promise<void>((resolve) => (notify = resolve));
      notify = undefined;
    }
    if (failure && !(stop.signal.aborted && isAbortError(failure.err))) throw failure.err;
  } finally {
    stop.abort();
    await waiting;
  }
}
