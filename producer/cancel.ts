/**
 * Cancelling a job from ANY process. BullMQ's worker.cancelJob() only reaches the process that runs the
 * job, so kmfleet signals through Redis:
 *
 *   producer  requestCancel(redis, keys, jobId), one Lua script:
 *               0. a job past its commit point (the worker marked `committed` in keys.checkpoint(jobId) before it
 *                  copied its outputs into place) is not cancelled: 'committed', the job completes
 *               1. SET  keys.cancel(jobId) = reason  (PX 24 h)  — durable: seen by a worker that starts later
 *               2. PUBLISH keys.cancelChannel jobId              — fast: seen at once by the running worker
 *             then (KmfleetClient.cancel) a job that is not active yet is simply removed from the queue.
 *
 *   worker    one CancelListener per process (its own subscriber connection):
 *               const cancels = new CancelListener(redis, keys); await cancels.start();
 *               processor: const w = cancels.watch(job.id);      // checks the flag at once, then listens
 *                          try { ... pass w.signal to the engine (engine.cancel() on 'abort'),
 *                                    check w.signal.aborted at every chunk boundary ...
 *                                if (w.signal.aborted) throw new UnrecoverableError(CANCEL_REASON); }
 *                          finally { w.dispose(); }
 *             → the job fails with failedReason "cancelled", no retry (UnrecoverableError), no outputs
 *               (summary.json is never written, no recordResult). Also poll every pollMs (default 250 ms),
 *               so a pub/sub message lost during a reconnect still stops the job within a second. A cancel that
 *               arrives while the outputs upload aborts the uploads; the worker's commit point checks the flag
 *               atomically (worker/checkpoints/fence-scripts.ts COMMIT_SCRIPT), so a cancel either wins before it
 *               or is refused after it.
 */
import type { Keys } from './keys.js';
import type { RedisClient } from './job-state.js';

/** The failedReason of a cancelled job (the message of the UnrecoverableError the worker throws). */
export const CANCEL_REASON = 'cancelled';
export const CANCEL_TTL_MS = 24 * 3600 * 1000;

export function isCancelledReason(failedReason: string | undefined | null): boolean {
  return failedReason === CANCEL_REASON;
}

/** KEYS: cancel flag, checkpoint record · ARGV: reason, ttlMs, channel, jobId → 1 requested, 0 past the commit point. */
const REQUEST_CANCEL_SCRIPT = `
if redis.call('HEXISTS', KEYS[2], 'committed') == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`;

/**
 * Sets the cancel flag and publishes the job id, unless the job's worker has passed its commit point ('committed':
 * the job completes whatever is asked now). Idempotent.
 */
export async function requestCancel(redis: RedisClient, keys: Keys, jobId: string, reason = CANCEL_REASON): Promise<'requested' | 'committed'> {
  const r = await redis.eval(REQUEST_CANCEL_SCRIPT, 2, keys.cancel(jobId), keys.checkpoint(jobId), reason, String(CANCEL_TTL_MS), keys.cancelChannel, jobId);
  return Number(r) === 1 ? 'requested' : 'committed';
}

/** The cancel reason if a cancel was requested for the job, else null. */
export async function cancelRequested(redis: RedisClient, keys: Keys, jobId: string): Promise<string | null> {
  return redis.get(keys.cancel(jobId));
}

export async function clearCancel(redis: RedisClient, keys: Keys, jobId: string): Promise<void> {
  await redis.del(keys.cancel(jobId));
}

export interface CancelWatch {
  /** Aborts (reason = the cancel reason) when a cancel is requested for the job. */
  readonly signal: AbortSignal;
  /** Stops watching; call in a finally. */
  dispose(): void;
}

/**
 * The receiving side, one per worker process. Uses its own duplicate of `redis` for SUBSCRIBE and the
 * given connection for the flag checks. On a Redis Cluster the duplicate is a Cluster too: ioredis subscribes through
 * one node it picks (and re-picks when that node goes), and a cluster delivers PUBLISH to subscribers on every node.
 */
export class CancelListener {
  private readonly watches = new Map<string, Set<AbortController>>();
  private subscriber: RedisClient | undefined;
  private timer: NodeJS.Timeout | undefined;
  private polling = false;
  private closed = false;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly opts: { pollMs?: number; onError?: (err: unknown) => void } = {},
  ) {}

  /** Subscribes to the cancel channel; resolves once the subscription is active. */
  async start(): Promise<void> {
    if (this.subscriber) return;
    const sub = this.redis.duplicate();
    this.subscriber = sub;
    sub.on('error', (err) => this.opts.onError?.(err));
    sub.on('message', (channel: string, jobId: string) => {
      if (channel === this.keys.cancelChannel) void this.check([jobId]);
    });
    await sub.subscribe(this.keys.cancelChannel);
    this.timer = setInterval(() => void this.poll(), this.opts.pollMs ?? 250);
    this.timer.unref();
  }

  /** Watches a job: the flag is checked at once (a cancel may predate the job's start). */
  watch(jobId: string): CancelWatch {
    const ctl = new AbortController();
    let set = this.watches.get(jobId);
    if (!set) this.watches.set(jobId, (set = new Set()));
    set.add(ctl);
    void this.check([jobId]);
    return {
      signal: ctl.signal,
      dispose: () => {
        const s = this.watches.get(jobId);
        s?.delete(ctl);
        if (s && s.size === 0) this.watches.delete(jobId);
      },
    };
  }

  private async poll(): Promise<void> {
    if (this.polling || this.watches.size === 0) return;
    this.polling = true;
    try {
      await this.check([...this.watches.keys()]);
    } finally {
      this.polling = false;
    }
  }

  private async check(jobIds: string[]): Promise<void> {
    const ids = jobIds.filter((id) => this.watches.has(id));
    if (ids.length === 0 || this.closed) return;
    let reasons: (string | null)[];
    try {
      reasons = await this.redis.mget(ids.map((id) => this.keys.cancel(id)));
    } catch (err) {
      this.opts.onError?.(err);
      return;
    }
    ids.forEach((id, i) => {
      const reason = reasons[i];
      if (reason === null) return;
      for (const ctl of this.watches.get(id) ?? []) if (!ctl.signal.aborted) ctl.abort(reason);
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    const sub = this.subscriber;
    this.subscriber = undefined;
    if (sub) {
      try {
        await sub.quit();
      } catch {
        sub.disconnect();
      }
    }
  }
}
