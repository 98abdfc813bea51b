/**
 * The long-poll wait: the SDK's wait, ended early by a timeout, by progress newer than what the client has seen, or by
 * the client going away. The answer's outcome comes from the job's state read after the wait, so a job that ended
 * in the same instant is never reported as still pending.
 */
import { isCancelledReason } from '../producer/cancel.js';
import type { JobInfo } from '../producer/client-options.js';
import type { KmfleetClient } from '../producer/client.js';
import { JobCancelledError, JobNotFoundError, RedisUnavailableError } from '../producer/errors/index.js';

export type WaitOutcome = 'completed' | 'failed' | 'cancelled' | 'pending';

export interface WaitAnswer {
  outcome: WaitOutcome;
  job: JobInfo | null;
}

export function outcomeOf(job: JobInfo): WaitOutcome {
  if (job.state === 'completed') return 'completed';
  if (job.state === 'failed') return isCancelledReason(job.failedReason) ? 'cancelled' : 'failed';
  return 'pending';
}

export async function waitForJob(
  client: KmfleetClient,
  jobId: string,
  opts: { timeoutMs: number; progressAfter?: number; signal?: AbortSignal },
): Promise<WaitAnswer> {
  const stop = new AbortController();
  const onClientGone = () => stop.abort();
  opts.signal?.addEventListener('abort', onClientGone, { once: true });
  let cancelled = false;
  try {
    await client.wait(jobId, {
      timeoutMs: opts.timeoutMs,
      signal: stop.signal,
      // the SDK's 'queued' report stands in for a worker's first one; the job itself has no progress to answer with yet
      onProgress: (progress) => {
        if (opts.progressAfter !== undefined && progress.phase !== 'queued' && progress.updatedAt > opts.progressAfter) stop.abort();
      },
    });
  } catch (err) {
    // a job that failed or completed is read below; a timeout or an abort (whatever error the SDK uses for them) is 'pending'
    if (err instanceof JobNotFoundError || err instanceof RedisUnavailableError) throw err;
    if (err instanceof JobCancelledError) cancelled = true;
  } finally {
    opts.signal?.removeEventListener('abort', onClientGone);
  }
  const job = await client.get(jobId);
  if (!job) {
    if (cancelled) return { outcome: 'cancelled', job: null };
    throw new JobNotFoundError(jobId, 'removed while waiting');
  }
  return { outcome: outcomeOf(job), job };
}
