/**
 * The queue exporter: a process with no GPU that serves only the queue-depth gauges (and its own health).
 *
 * Why it exists: the autoscaler must be able to scale the worker Deployment from ZERO pods, and a fleet of zero
 * workers exports nothing. So one small always-on pod (infra/k8s/queue-exporter.yaml, the `queue-exporter`
 * service in compose) reads the queue on each scrape and KEDA's Prometheus query reads its gauges.
 *
 *   node dist/worker/metrics/queue-exporter.js          (in the image: the same entrypoint, another command)
 *
 * Environment: REDIS_URL (redis:// or rediss://), KMFLEET_QUEUE (queue name), KMFLEET_REDIS_PREFIX (BullMQ
 * prefix), KMFLEET_METRICS_PORT (default 9464). Ready while Redis answers; healthy while the process runs.
 */
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { pathToFileURL } from 'node:url';
import { createFleetMetrics } from './fleet-metrics.js';
import { DEFAULT_METRICS_PORT, startMetricsServer, type MetricsServer } from './metrics-server.js';

export const DEFAULT_QUEUE_NAME = 'kmeans';
export const DEFAULT_REDIS_PREFIX = '{kmfleet}';

export interface QueueExporterOptions {
  redisUrl: string;
  queueName?: string;
  prefix?: string;
  port?: number;
  host?: string;
}

export interface QueueExporter {
  readonly server: MetricsServer;
  close(): Promise<void>;
}

export async function startQueueExporter(opts: QueueExporterOptions): Promise<QueueExporter> {
  // Fail a scrape fast rather than hang it: one retry per command, no offline queue.
  const connection = new Redis(opts.redisUrl, {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 5_000,
    lazyConnect: false,
  });
  connection.on('error', () => {
    /* reported through kmfleet_queue_up and /readyz; ioredis reconnects by itself */
  });
  const queue = new Queue(opts.queueName ?? DEFAULT_QUEUE_NAME, {
    connection,
    prefix: opts.prefix ?? DEFAULT_REDIS_PREFIX,
  });
  queue.on('error', () => {
    /* same: visible in the metrics, never fatal */
  });
  const metrics = createFleetMetrics({ queue });
  const server = await startMetricsServer({
    port: opts.port ?? DEFAULT_METRICS_PORT,
    host: opts.host,
    registry: metrics.registry,
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

function portFromEnv(v: string | undefined): number {
  if (v === undefined || v === '') return DEFAULT_METRICS_PORT;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65_535) {
    throw new Error(`KMFLEET_METRICS_PORT must be a port number, got ${JSON.stringify(v)}`);
  }
  return n;
}

async function main(): Promise<void> {
  const redisUrl = process.env.REDIS_URL;
  if (!redisUrl) throw new Error('REDIS_URL is required (redis://host:6379 or rediss://…)');
  const exporter = await startQueueExporter({
    redisUrl,
    queueName: process.env.KMFLEET_QUEUE || undefined,
    prefix: process.env.KMFLEET_REDIS_PREFIX || undefined,
    port: portFromEnv(process.env.KMFLEET_METRICS_PORT),
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
