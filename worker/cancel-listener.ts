/**
 * The worker's side of cancel (producer/cancel.ts has the contract: the flag, the channel, requestCancel): one
 * listener per process, subscribed to the cancel channel, that aborts the watch of each job it is told about — and
 * polls the flags, so that a message lost in a reconnect still stops the job within a second.
 */
import type { RedisClient } from '../producer/job-state.js';
import type { Keys } from '../producer/keys.js';

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
