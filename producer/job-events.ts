/**
 * A client's view of BullMQ's queue events (QueueEvents: an XREAD on the queue's event stream), shared by every
 * wait() of one client: a job's progress, state changes and end wake its waiters at once, so they re-read the job
 * instead of polling it. QueueEvents needs a connection of its own that blocks; it is a duplicate of the client's with
 * BullMQ's blocking options, so it reconnects by itself while the waiters' safety poll goes on.
 */
import { QueueEvents } from 'bullmq';
import type { Cluster, Redis } from 'ioredis';
import type { RedisClient } from './job-state.js';
import type { Keys } from './keys.js';
import { isCluster } from './redis-factory.js';

/** Every event BullMQ publishes about one job (as `<event>:<jobId>` on QueueEvents). */
const JOB_EVENTS = [
  'active', 'waiting', 'delayed', 'prioritized', 'progress', 'completed', 'failed', 'removed', 'retries-exhausted', 'stalled',
] as const;

/** BullMQ requires maxRetriesPerRequest: null on a blocking connection, and the XREAD must queue while reconnecting. */
function blockingDuplicate(redis: RedisClient): Redis | Cluster {
  const blocking = { maxRetriesPerRequest: null, enableOfflineQueue: true, lazyConnect: false };
  if (isCluster(redis)) return redis.duplicate(undefined, { redisOptions: { ...redis.options.redisOptions, ...blocking } });
  return redis.duplicate(blocking);
}

export class JobEvents {
  private readonly events: QueueEvents;
  private readonly connection: Redis | Cluster;
  private readonly ready: Promise<void>;
  private started = false;
  private broken = false;

  constructor(redis: RedisClient, keys: Keys) {
    this.connection = blockingDuplicate(redis);
    this.connection.on('error', () => (this.broken = true));
    this.connection.on('ready', () => (this.broken = false));
    this.events = new QueueEvents(keys.queueName, { connection: this.connection, prefix: keys.bullPrefix });
    this.events.on('error', () => (this.broken = true));
    this.ready = this.events.waitUntilReady().then(() => void (this.started = true));
    this.ready.catch(() => undefined); // a waiter that awaits it gets the error; nobody else must
  }

  /** Resolves once the event stream is read (events after this point reach the listeners). */
  whenReady(): Promise<void> {
    return this.ready;
  }

  /** Whether events are flowing now: false before the stream is read and while its connection is down. */
  get live(): boolean {
    return this.started && !this.broken;
  }

  /** Calls `wake` on any event about the job; returns the unsubscribe. */
  onJob(jobId: string, wake: () => void): () => void {
    const names = JOB_EVENTS.map((e) => `${e}:${jobId}`);
    // QueueEvents types its events by name; these per-job names are emitted but not in its typed map
    const ev = this.events as unknown as { on(n: string, f: () => void): void; off(n: string, f: () => void): void };
    for (const n of names) ev.on(n, wake);
    return () => {
      for (const n of names) ev.off(n, wake);
    };
  }

  /** Closes the stream; with Redis away QueueEvents.close() never settles (its QUIT waits offline), so it gets a second. */
  async close(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const closing = this.events.close().catch(() => undefined);
    await Promise.race([closing, new Promise<void>((resolve) => (timer = setTimeout(resolve, 1000)))]);
    clearTimeout(timer);
    if (this.connection.status !== 'end') this.connection.disconnect();
  }
}
