/**
 * The worker's Prometheus metrics: one prom-client Registry per process and a small API that the worker calls
 * at the points where things happen. Nothing here touches Redis except the optional queue-depth gauges.
 *
 *   const metrics = createFleetMetrics({ queue });          // queue: the worker's BullMQ Queue (optional)
 *   metrics.deviceInfo({ backend: 'cuda', device: 'NVIDIA H100', computeCapability: '9.0' });
 *   const job = metrics.jobStarted();                        // in-progress gauge 1
 *   metrics.s3BytesRead(n);                                  // a job's bytes fetched from S3
 *   metrics.tierBytes('host', n);                            // a job's bytes of rows processed, by where they came from
 *   metrics.iterationDone(ms, rows);                         // after each k-means iteration
 *   metrics.checkpointWritten(ms);                           // after each checkpoint upload
 *   metrics.deviceMemoryUsed(bytes, device);                 // after planning / each iteration
 *   job.end('completed' | 'failed' | 'retried' | 'released' | 'cancelled');
 *
 * Metric names are `kmfleet_*`; process and Node.js runtime metrics (`process_*`, `nodejs_*`) come too unless
 * `defaultMetrics: false`. Label cardinality stays bounded: no job ids, no dataset names in labels.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { registerQueueDepthGauges, type JobCountsSource, type QueueDepthGauges } from './queue-depth.js';

/**
 * How a job left this worker:
 *  completed  summary.json written, result recorded;
 *  failed     failed for good (bad spec or dataset, attempts exhausted);
 *  retried    failed, BullMQ will retry it (attempts left);
 *  released   handed back on SIGTERM after a checkpoint, no attempt spent (preemption, scale-down);
 *  cancelled  cancelled through the queue (AbortSignal).
 */
/** Where the rows of a pass came from (core TierSummary): the engine's tiers, then the fed rows' source. */
export type RowTier = 'resident' | 'host' | 'memory' | 'disk' | 's3';

export const JOB_OUTCOMES = ['completed', 'failed', 'retried', 'released', 'cancelled'] as const;
export type JobOutcome = (typeof JOB_OUTCOMES)[number];

export interface DeviceInfo {
  backend: string; // 'cuda' | 'cpu'
  device: string; // e.g. 'NVIDIA H100 80GB HBM3' or the CPU model
  computeCapability?: string; // '9.0'
  driver?: string; // driver version as the CUDA runtime reports it
}

export interface RunningJob {
  /** Records the outcome and duration; returns the duration in seconds. Idempotent: only the first call counts. */
  end(outcome: JobOutcome): number;
}

export interface FleetMetricsOptions {
  /** Export the queue-depth gauges from this queue (refreshed on each scrape). */
  queue?: JobCountsSource;
  /** prom-client's process_* and nodejs_* metrics; default true. */
  defaultMetrics?: boolean;
  /** Labels added to every sample, e.g. the pod name; Prometheus usually adds it itself. */
  defaultLabels?: Record<string, string>;
  /** Use this registry instead of a new one. */
  registry?: Registry;
}

export interface FleetMetrics {
  readonly registry: Registry;
  /** Present when `queue` was given. */
  readonly queueDepth: QueueDepthGauges | undefined;
  jobStarted(): RunningJob;
  iterationDone(ms: number, rows: number): void;
  s3BytesRead(bytes: number): void;
  /** bytes of dataset rows the engine processed, by the tier they came from (summed over a job's passes) */
  tierBytes(tier: RowTier, bytes: number): void;
  checkpointWritten(ms: number): void;
  /** Device memory the engine holds; `device` names the GPU on multi-GPU workers (label, default ''). */
  deviceMemoryUsed(bytes: number, device?: string): void;
  /** Records a device this worker runs jobs on (one series per distinct device; a worker with 2 GPUs shows 2). */
  deviceInfo(info: DeviceInfo): void;
}

const JOB_SECONDS = [1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14_400, 43_200];
const ITERATION_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
const CHECKPOINT_SECONDS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

function finiteNonNegative(what: string, v: number): number {
  if (!Number.isFinite(v) || v < 0) throw new RangeError(`metrics: ${what} must be a finite number >= 0, got ${v}`);
  return v;
}

export function createFleetMetrics(opts: FleetMetricsOptions = {}): FleetMetrics {
  const registry = opts.registry ?? new Registry();
  if (opts.defaultLabels) registry.setDefaultLabels(opts.defaultLabels);
  if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: registry });
  const registers = [registry];

  const started = new Counter({ name: 'kmfleet_jobs_started_total', help: 'Jobs taken by this worker', registers });
  const jobs = new Counter({
    name: 'kmfleet_jobs_total',
    help: 'Jobs that left this worker, by outcome (completed, failed, retried, released, cancelled)',
    labelNames: ['outcome'],
    registers,
  });
  for (const o of JOB_OUTCOMES) jobs.inc({ outcome: o }, 0); // every outcome exported from the start
  const inProgress = new Gauge({
    name: 'kmfleet_jobs_in_progress',
    help: 'Jobs running on this worker now (0 or 1 with one GPU)',
    registers,
  });
  const jobSeconds = new Histogram({
    name: 'kmfleet_job_duration_seconds',
    help: 'Wall time of a job on this worker, from taking it to its outcome',
    labelNames: ['outcome'],
    buckets: JOB_SECONDS,
    registers,
  });
  const iterationSeconds = new Histogram({
    name: 'kmfleet_iteration_duration_seconds',
    help: 'Wall time of one k-means iteration (one pass over the dataset)',
    buckets: ITERATION_SECONDS,
    registers,
  });
  const iterations = new Counter({ name: 'kmfleet_iterations_total', help: 'Iterations completed', registers });
  const rowsTotal = new Counter({ name: 'kmfleet_rows_processed_total', help: 'Rows visited by fit passes', registers });
  const rowsPerSecond = new Gauge({
    name: 'kmfleet_rows_per_second',
    help: 'Throughput of the last iteration (rows / iteration wall time)',
    registers,
  });
  const s3Bytes = new Counter({
    name: 'kmfleet_s3_bytes_read_total',
    help: 'Dataset bytes fetched from S3',
    registers,
  });
  const tierBytes = new Counter({
    name: 'kmfleet_dataset_bytes_total',
    help: 'Bytes of dataset rows processed by the engine, by where they came from: resident (the device), host (the host tier), memory (the memory cache), disk (the pod cache), s3',
    labelNames: ['tier'],
    registers,
  });
  const checkpointSeconds = new Histogram({
    name: 'kmfleet_checkpoint_duration_seconds',
    help: 'Latency of writing one checkpoint (serialize + upload + Redis record)',
    buckets: CHECKPOINT_SECONDS,
    registers,
  });
  const deviceMemory = new Gauge({
    name: 'kmfleet_device_memory_used_bytes',
    help: 'Device memory held by the engine (resident chunks, centroids, buffers), per device',
    labelNames: ['device'],
    registers,
  });
  const device = new Gauge({
    name: 'kmfleet_device_info',
    help: 'The backend and device this worker runs on (value 1; the labels carry the information)',
    labelNames: ['backend', 'device', 'compute_capability', 'driver'],
    registers,
  });

  const queueDepth = opts.queue ? registerQueueDepthGauges(registry, opts.queue) : undefined;

  return {
    registry,
    queueDepth,
    jobStarted(): RunningJob {
      started.inc();
      inProgress.inc();
      const t0 = process.hrtime.bigint();
      let done = false;
      return {
        end(outcome: JobOutcome): number {
          const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
          if (done) return seconds;
          if (!JOB_OUTCOMES.includes(outcome)) throw new RangeError(`metrics: unknown job outcome '${outcome}'`);
          done = true;
          inProgress.dec();
          jobs.inc({ outcome });
          jobSeconds.observe({ outcome }, seconds);
          return seconds;
        },
      };
    },
    iterationDone(ms: number, rows: number): void {
      finiteNonNegative('iteration ms', ms);
      finiteNonNegative('rows', rows);
      iterations.inc();
      iterationSeconds.observe(ms / 1000);
      rowsTotal.inc(rows);
      if (ms > 0) rowsPerSecond.set(rows / (ms / 1000));
    },
    s3BytesRead(bytes: number): void {
      s3Bytes.inc(finiteNonNegative('bytes', bytes));
    },
    tierBytes(tier: RowTier, bytes: number): void {
      tierBytes.inc({ tier }, finiteNonNegative('bytes', bytes));
    },
    checkpointWritten(ms: number): void {
      checkpointSeconds.observe(finiteNonNegative('checkpoint ms', ms) / 1000);
    },
    deviceMemoryUsed(bytes: number, deviceName = ''): void {
      deviceMemory.set({ device: deviceName }, finiteNonNegative('device memory bytes', bytes));
    },
    deviceInfo(info: DeviceInfo): void {
      // no reset: a worker with several GPUs (one job per GPU) reports each device once
      device.set(
        {
          backend: info.backend,
          device: info.device,
          compute_capability: info.computeCapability ?? '',
          driver: info.driver ?? '',
        },
        1,
      );
    },
  };
}
