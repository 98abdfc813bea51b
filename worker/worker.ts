/**
 * The worker process's assembly: Redis connections (workers never give up: maxRetriesPerRequest null), the
 * noeviction check, the cancel listener, the S3 client, metrics, and the BullMQ Worker running the processor.
 *
 *   const w = await startWorker(loadWorkerConfig());     // refuses an evicting Redis
 *   installShutdownHandlers(w);                           // lifecycle.ts: SIGTERM → hand jobs back, exit in the grace
 *   ... await w.shutdown('SIGTERM');
 */
import { UnrecoverableError, Worker } from 'bullmq';
import { KmfleetError } from '../errors/index.js';
import * as native from '../native/index.js';
import { CancelListener } from './cancel-listener.js';
import { describeConnection } from '../producer/connection.js';
import { evictingNode } from '../producer/eviction-policy.js';
import { createRedisClient, isCluster } from '../producer/redis-factory.js';
import { keyspace, type Keys } from '../producer/keys.js';
import { queueTelemetry } from '../producer/telemetry.js';
import type { WorkerConfig } from './config.js';
import { createLogger, type Logger } from './logger.js';
import { createFleetMetrics, startMetricsServer, type FleetMetrics, type MetricsServer } from './metrics/index.js';
import { DevicePool } from './device-pool.js';
import type { GpuCount } from '../core/index.js';
import { EngineReleases } from './engine-releases.js';
import { LockLossRegistry } from './lock-loss.js';
import { createProcessor, type OpenEngine } from './processor.js';
import { createS3, type S3Handle } from './s3/client.js';
import { jobIdKeyProblem } from './s3/uri.js';

export class RedisPolicyError extends KmfleetError {
  readonly code = 'REDIS_POLICY';
  /** `node`: the cluster node (host:port) whose policy evicts, in cluster mode */
  constructor(readonly policy: string, readonly node?: string) {
    super(
      `Redis maxmemory-policy is "${policy}"${node ? ` on cluster node ${node}` : ''}; kmfleet workers need "noeviction" ` +
        '(an evicting Redis silently drops ' +
        'queued jobs, locks and checkpoint records). Set it with `CONFIG SET maxmemory-policy noeviction` ' +
        (node ? '(on every master of the cluster) ' : '') +
        '(and `maxmemory-policy noeviction` in redis.conf, or your provider\'s parameter group) and start the worker again.',
    );
  }
}

export interface StartWorkerOptions {
  logger?: Logger;
  s3?: S3Handle;
  openEngine?: OpenEngine;
  /** default: config.metricsPort (0 = none) */
  metricsPort?: number;
  /**
   * Log 'worker started' before returning (default true). A process that installs signal handlers passes false and
   * calls announce() once they are in place: whoever waits for that line may send SIGTERM at once.
   */
  announce?: boolean;
}

export interface KmfleetWorker {
  readonly worker: Worker;
  readonly keys: Keys;
  readonly logger: Logger;
  readonly concurrency: number;
  readonly metrics: FleetMetrics;
  readonly metricsServer: MetricsServer | undefined;
  /** true once shutdown() began */
  readonly draining: boolean;
  /** Stop taking jobs, make running ones checkpoint and go back to the queue, close everything. Idempotent. */
  shutdown(reason?: string): Promise<void>;
  /** Logs 'worker started' (once) with where it is connected. */
  announce(): void;
}

/** Jobs at once: each takes gpusPerJob of the GPUs ('all': every one; 'auto': one at least, more for a large job). */
function defaultConcurrency(gpus: number, gpusPerJob: GpuCount): number {
  if (gpusPerJob === 'all') return 1;
  return Math.max(1, Math.floor(gpus / (gpusPerJob === 'auto' ? 1 : gpusPerJob)));
}

/** CUDA device ordinals this process sees (none without a GPU or a CUDA build). */
function gpuOrdinals(): number[] {
  try {
    const info = typeof native.gpuInfo === 'function' ? native.gpuInfo() : undefined;
    return info?.available ? info.devices.map((d) => d.ordinal) : [];
  } catch {
    return [];
  }
}

export async function startWorker(config: WorkerConfig, opts: StartWorkerOptions = {}): Promise<KmfleetWorker> {
  const logger = opts.logger ?? createLogger({ level: config.logLevel });
  const keys = keyspace({ prefix: config.prefix, queue: config.queue });
  // One client (a node or, with REDIS_CLUSTER_NODES, a cluster) for our own writes, the cancel flags and BullMQ, which
  // shares it and duplicates it for its blocking connection (maxRetriesPerRequest null either way).
  const redis = createRedisClient(config.redis, 'worker');
  redis.on('error', (err: Error) => logger.warn({ err: err.message }, 'redis connection error'));
  const where = describeConnection(config.redis);
  try {
    // every master of a cluster: a resharding may move the {prefix} slot to any of them
    const bad = await evictingNode(redis);
    if (bad?.policy) throw new RedisPolicyError(bad.policy, isCluster(redis) ? bad.node : undefined);
  } catch (err) {
    redis.disconnect();
    throw err;
  }

  const s3 = opts.s3 ?? createS3(config.s3);
  const cancels = new CancelListener(redis, keys, {
    pollMs: config.cancelPollMs,
    onError: (err) => logger.warn({ err: (err as Error).message }, 'cancel listener error'),
  });
  await cancels.start();

  const preempt = new AbortController();
  const metrics = createFleetMetrics();
  const devices = new DevicePool(gpuOrdinals());
  const concurrency = config.concurrency ?? defaultConcurrency(devices.size, config.gpusPerJob);
  const lockLoss = new LockLossRegistry();
  const releases = new EngineReleases({ onError: (err, jobId) => logger.error({ err, jobId }, 'closing the engine of a finished job failed') });
  const run = createProcessor({ config, redis, keys, s3, logger, cancels, preempt: preempt.signal, metrics, openEngine: opts.openEngine, lockLoss, devices, releases });
  // A job put into Redis by hand may have an id ('..', 'a/b') that, as <output>/<jobId>/, names keys outside the
  // output prefix: refused before anything runs (the producer refuses such ids at enqueue).
  const processor: typeof run = (job, token, signal) => {
    const problem = jobIdKeyProblem(job.id ?? '');
    if (problem !== null) return Promise.reject(new UnrecoverableError(`invalid job: job id ${JSON.stringify(job.id)} ${problem}`));
    return run(job, token, signal);
  };
  const worker = new Worker(keys.queueName, processor, {
    connection: redis,
    prefix: keys.bullPrefix,
    concurrency,
    lockDuration: config.lockDurationMs,
    stalledInterval: config.stalledIntervalMs,
    maxStalledCount: config.maxStalledCount,
    autorun: true,
    telemetry: queueTelemetry(), // with tracing on: each job's `process` span continues the producer's trace
  });
  worker.on('error', (err) => logger.error({ err: err.message }, 'worker error'));
  // a finished job's engine is closed once BullMQ has recorded the job's end: its completion no longer waits for that
  worker.on('completed', (job) => releases.reported(job.id));
  worker.on('failed', (job) => releases.reported(job?.id));
  worker.on('lockRenewalFailed', (jobIds: string[]) => {
    logger.warn({ jobIds }, 'could not renew job locks: stopping those jobs');
    lockLoss.lost(jobIds);
  });

  let draining = false;
  const metricsPort = opts.metricsPort ?? config.metricsPort;
  const metricsServer =
    metricsPort > 0
      ? await startMetricsServer({
          port: metricsPort,
          registry: metrics.registry,
          ready: () => !draining && redis.status === 'ready',
          healthy: () => true,
        })
      : undefined;

  let closing: Promise<void> | undefined;
  let announced = false;
  const handle: KmfleetWorker = {
    worker,
    keys,
    logger,
    concurrency,
    metrics,
    metricsServer,
    get draining() {
      return draining;
    },
    shutdown(reason = 'shutdown') {
      closing ??= (async () => {
        draining = true;
        logger.info({ reason }, 'shutting down: running jobs checkpoint and go back to the queue');
        preempt.abort(new Error(`worker shutting down (${reason})`));
        await worker.close();
        releases.releaseAll();
        await cancels.close();
        await metricsServer?.close();
        if (!opts.s3) s3.destroy();
        await redis.quit().catch(() => redis.disconnect());
        logger.info('worker stopped');
      })();
      return closing;
    },
    announce() {
      if (announced) return;
      announced = true;
      logger.info(
        { redis: where, queue: keys.queueName, prefix: keys.bullPrefix, concurrency, gpus: devices.ordinals, s3: config.s3.endpoint ?? 'aws', metricsPort: metricsServer?.port },
        'worker started',
      );
    },
  };
  if (opts.announce !== false) handle.announce();
  return handle;
}
