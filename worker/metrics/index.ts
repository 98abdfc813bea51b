/**
 * Worker metrics: what the worker calls, what Prometheus scrapes, what KEDA scales on.
 *
 * Wiring (in the worker's start-up):
 *
 *   import { createFleetMetrics, startMetricsServer, DEFAULT_METRICS_PORT } from './metrics/index.js';
 *   const metrics = createFleetMetrics({ queue });           // queue optional: the queue exporter serves it anyway
 *   const server = await startMetricsServer({
 *     port: config.metricsPort ?? DEFAULT_METRICS_PORT,      // 9464; the manifests and compose use it
 *     registry: metrics.registry,
 *     ready: () => redisReady && !draining,                  // /readyz: 503 once SIGTERM arrived
 *     healthy: () => !wedged,                                // /healthz: 503 only when a restart would help
 *   });
 *   // on shutdown, after the job was handed back: await server.close();
 *
 * Per job:
 *   const job = metrics.jobStarted();
 *   metrics.deviceInfo({ backend, device, computeCapability, driver });  // once the engine is open
 *   metrics.s3BytesRead(bytes);                 // every ranged GET or cache read that fed the engine
 *   metrics.iterationDone(ms, rows);            // after each fit pass
 *   metrics.checkpointWritten(ms);              // after each checkpoint (upload + Redis record)
 *   metrics.deviceMemoryUsed(bytes, device);    // from the engine's plan / after each pass (device: GPU name or index)
 *   job.end('completed' | 'failed' | 'retried' | 'released' | 'cancelled');
 *
 * Metrics (all `kmfleet_*`): jobs_started_total, jobs_total{outcome}, jobs_in_progress, job_duration_seconds{outcome},
 * iteration_duration_seconds, iterations_total, rows_processed_total, rows_per_second, s3_bytes_read_total,
 * checkpoint_duration_seconds, device_memory_used_bytes{device}, device_info{backend,device,compute_capability,driver},
 * and with a queue: queue_jobs{queue,state}, queue_pending{queue}, queue_up{queue},
 * queue_scrape_errors_total{queue}. KEDA reads max(kmfleet_queue_pending) (docs/operations.md, Autoscaling).
 */
export {
  createFleetMetrics,
  JOB_OUTCOMES,
  type DeviceInfo,
  type FleetMetrics,
  type FleetMetricsOptions,
  type JobOutcome,
  type RunningJob,
} from './fleet-metrics.js';
export {
  registerQueueDepthGauges,
  QUEUE_DEPTH_METRICS,
  QUEUE_STATES,
  type JobCountsSource,
  type QueueDepth,
  type QueueDepthGauges,
} from './queue-depth.js';
export {
  startMetricsServer,
  DEFAULT_METRICS_PORT,
  METRICS_PATH,
  HEALTH_PATH,
  READY_PATH,
  type MetricsServer,
  type MetricsServerOptions,
} from './metrics-server.js';
export { startQueueExporter, type QueueExporter, type QueueExporterOptions } from './queue-exporter.js';
