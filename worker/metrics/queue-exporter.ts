/**
 * The queue exporter: a process with no GPU that serves only the queue-depth gauges (and its own health).
 *
 * Why it exists: the autoscaler must be able to scale the worker Deployment from ZERO pods, and a fleet of zero
 * workers exports nothing. So one small always-on pod (infra/k8s/queue-exporter.yaml, the `queue-exporter`
 * service in compose) reads the queue on each scrape and KEDA's Prometheus query reads its gauges.
 *
 *   node dist/worker/metrics/queue-exporter.js          (in the image: the same entrypoint, another command)
 *
 * Configuration: the worker's (worker/config.ts, the same ConfigMap): REDIS_URL (redis:// or rediss://),
 * REDIS_CLUSTER_NODES (a Redis Cluster), KMFLEET_PREFIX, KMFLEET_QUEUE, KMFLEET_METRICS_PORT. Ready while Redis answers; healthy while the process runs.
 */
import { Queue } from 'bullmq';
import { pathToFileURL } from 'node:url';
import { parseRedisUrl, type RedisConnectionOptions } from '../../producer/connection.js';
import { createRedisClient } from '../../producer/redis-factory.js';
import { keyspace } from '../../producer/keys.js';
import { loadWorkerConfig } from '../config.js';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { registerQueueDepthGauges } from './queue-depth.js';
import { DEFAULT_METRICS_PORT, startMetricsServer, type MetricsServer } from './metrics-server.js';

export interface QueueExporterOptions {
  /** A REDIS_URL or parsed connection options (with `cluster`: a Redis Cluster). */
  redis: string | RedisConnectionOptions;
  /** Key prefix without braces (producer/keys.ts; default kmfleet). */
  prefix?: string;
  /** BullMQ queue name (default jobs). */
  queue?: string;
  port?: number;
  host?: string;
}

export interface QueueExporter {
  readonly server: MetricsServer;
  close(): Promise<void>;
}

export async function startQueueExporter(opts: QueueExporterOptions): Promise<QueueExporter> {
  const keys = keyspace({ prefix: opts.prefix, queue: opts.queue });
  const base = typeof opts.redis === 'string' ? parseRedisUrl(opts.redis) : opts.redis;
  // Fail a scrape fast rather than hang it (the producer's options: no offline queue, one retry per command).
  const connection = createRedisClient(base, 'producer', { overrides: { lazyConnect: false } });
  connection.on('error', () => {
    /* reported through kmfleet_queue_up and /readyz; ioredis reconnects by itself */
  });
  const queue = new Queue(keys.queueName, { connection, prefix: keys.bullPrefix });
  queue.on('error', () => {
    /* same: visible in the metrics, never fatal */
  });
  // Only the queue gauges and the process metrics: no worker metrics, so that dashboards counting worker series
  // (count(kmfleet_jobs_in_progress)) never count the exporter as a worker.
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  registerQueueDepthGauges(registry, queue);
  const server = await startMetricsServer({
    port: opts.port ?? DEFAULT_METRICS_PORT,
    host: opts.host,
    registry,
    ready: () => connection.status === 'ready',
    healthy: () => true,
  });
  return {
    server,
    async close() {
      await server.close();
      await queue.close();
      connection.disconnect();
    },
  };
}

async function main(): Promise<void> {
  const config = loadWorkerConfig();
  const exporter = await startQueueExporter({
    redis: config.redis,
    prefix: config.prefix,
    queue: config.queue,
    port: config.metricsPort === 0 ? DEFAULT_METRICS_PORT : config.metricsPort, // 0 turns a worker's server off; the exporter is nothing else
  });
  process.stdout.write(`kmfleet queue exporter listening on :${exporter.server.port}\n`);
  const stop = () => {
    exporter.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e: unknown) => {
    process.stderr.write(`kmfleet queue exporter: ${(e as Error).message}\n`);
    process.exit(1);
  });
}
