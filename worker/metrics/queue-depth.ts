/**
 * Queue-depth gauges, read from BullMQ on every scrape (never on a timer, so an idle fleet costs Redis nothing
 * when nobody scrapes): `kmfleet_queue_jobs{state}`, one series per state, and `kmfleet_queue_pending`, the one
 * series the autoscaler reads (a sum over states would have to be taken per pod before the max() across pods,
 * which KEDA's query should not have to spell out) = waiting + prioritized + active:
 *
 *  - waiting and prioritized are the work not yet taken. Prioritized jobs live in a ZSET, which is why KEDA's
 *    Redis list scaler (it sees only the `wait` LIST) can't be used and we scale on this gauge instead.
 *  - active is the work being done. Counting it keeps the desired replica count at or above the number of busy
 *    pods, so the fleet never shrinks under a running job, and only reaches zero when nothing runs.
 *  - delayed (retry back-off, scheduled jobs) is exported but not counted: a job due in an hour should not hold
 *    a GPU now. When it becomes due it moves to `wait` and the fleet scales up from there.
 *
 * Every pod that registers these gauges reports the same global numbers, so aggregate with max(), never sum().
 * One getJobCounts call (one Redis round trip) serves the gauges of a scrape.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

/** The part of a BullMQ `Queue` that we use (a `Queue` satisfies it). */
export interface JobCountsSource {
  readonly name: string;
  getJobCounts(...types: Array<'waiting' | 'prioritized' | 'delayed' | 'active'>): Promise<Record<string, number>>;
}

export interface QueueDepth {
  waiting: number;
  prioritized: number;
  delayed: number;
  active: number;
  /** waiting + prioritized + active: what the autoscaler reads. */
  pending: number;
}

/** The job states `kmfleet_queue_jobs` has a series for (its `state` label). */
export const QUEUE_STATES = ['waiting', 'prioritized', 'delayed', 'active'] as const;

export const QUEUE_DEPTH_METRICS = {
  jobs: 'kmfleet_queue_jobs',
  pending: 'kmfleet_queue_pending',
} as const;

export interface QueueDepthGauges {
  /** Read the counts now (what a scrape does), without going through the registry. */
  read(): Promise<QueueDepth>;
}

/**
 * Registers the queue-depth gauges on `registry`. On a Redis error the scrape still succeeds but these gauges
 * carry no sample (so Prometheus sees the series vanish rather than a stale or false zero), `kmfleet_queue_up`
 * is 0 and `kmfleet_queue_scrape_errors_total` counts the failure.
 */
export function registerQueueDepthGauges(registry: Registry, source: JobCountsSource): QueueDepthGauges {
  const labelNames = ['queue'] as const;
  const queue = source.name;
  let inFlight: Promise<QueueDepth | undefined> | undefined;

  const read = async (): Promise<QueueDepth> => {
    const c = await source.getJobCounts('waiting', 'prioritized', 'delayed', 'active');
    const waiting = c.waiting ?? 0;
    const prioritized = c.prioritized ?? 0;
    const delayed = c.delayed ?? 0;
    const active = c.active ?? 0;
    return { waiting, prioritized, delayed, active, pending: waiting + prioritized + active };
  };

  // The outcome of this scrape's read; up and errors are set from it inside collect(), so that a scrape reports
  // its own read and not the previous one (the registry collects all metrics concurrently).
  let failures = 0;

  /** One Redis read per scrape: the first metric collected starts it, the others await the same promise. */
  const refresh = (): Promise<QueueDepth | undefined> => {
    if (!inFlight) {
      inFlight = read()
        .catch(() => {
          failures += 1;
          return undefined;
        })
        .finally(() => {
          // keep the result for the rest of this scrape (all collect() calls start in the same tick)
          setImmediate(() => (inFlight = undefined));
        });
    }
    return inFlight;
  };

  new Counter({
    name: 'kmfleet_queue_scrape_errors_total',
    help: 'Scrapes whose queue-depth read from Redis failed',
    labelNames,
    registers: [registry],
    async collect() {
      await refresh();
      this.reset();
      this.inc({ queue }, failures); // exported at 0 from the start, so rate() works on the first error
    },
  });
  new Gauge({
    name: 'kmfleet_queue_up',
    help: '1 if the queue-depth read from Redis of this scrape succeeded, else 0',
    labelNames,
    registers: [registry],
    async collect() {
      this.set({ queue }, (await refresh()) === undefined ? 0 : 1);
    },
  });

  new Gauge({
    name: QUEUE_DEPTH_METRICS.jobs,
    help:
      'Jobs in the queue by state: waiting (not yet taken), prioritized (waiting with a priority: a ZSET the Redis ' +
      'list scaler cannot see), delayed (retry back-off or scheduled, not counted as pending), active (being processed)',
    labelNames: ['queue', 'state'] as const,
    registers: [registry],
    async collect() {
      const d = await refresh();
      this.reset();
      if (d !== undefined) for (const state of QUEUE_STATES) this.set({ queue, state }, d[state]);
    },
  });
  new Gauge({
    name: QUEUE_DEPTH_METRICS.pending,
    help: 'waiting + prioritized + active: the autoscaler target (aggregate with max, not sum)',
    labelNames,
    registers: [registry],
    async collect() {
      const d = await refresh();
      if (d === undefined) this.reset();
      else this.set({ queue }, d.pending);
    },
  });
  return { read };
}
