/**
 * Metrics over real HTTP with a real redis-server and a real BullMQ queue: the queue-depth gauges that KEDA
 * scales on, the health endpoints the kubelet probes, the worker API, and the standalone queue exporter.
 */
import { Queue, Worker } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePrometheus } from '../helpers/prometheus.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import {
  createFleetMetrics,
  startMetricsServer,
  startQueueExporter,
  type MetricsServer,
} from '../../worker/metrics/index.js';

async function scrape(server: MetricsServer): Promise<Map<string, number>> {
  const res = await fetch(`${server.url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheus(await res.text());
}

const QUEUE = 'metrics-test';
const PREFIX = '{kmfleet-test}';

describe('worker metrics with a real Redis and BullMQ queue', () => {
  let redis: RedisServerHandle;
  let queue: Queue;

  beforeAll(async () => {
    redis = await startRedisServer();
    queue = new Queue(QUEUE, { connection: redis.connection, prefix: PREFIX });
  });
  afterAll(async () => {
    await queue?.close();
    await redis?.stop();
  });

  it('exports waiting, prioritized, delayed, active and pending = waiting + prioritized + active', async () => {
    await queue.add('fit', { n: 1 });
    await queue.add('fit', { n: 2 });
    await queue.add('fit', { n: 3 });
    await queue.add('fit', { n: 4 }, { priority: 5 });
    await queue.add('fit', { n: 5 }, { priority: 1 });
    await queue.add('fit', { n: 6 }, { delay: 3_600_000 });
    // take one job by hand (no processor): it moves to active, as it does in a busy worker
    const taker = new Worker(QUEUE, null, { connection: redis.connection, prefix: PREFIX, autorun: false });
    const token = 'test-token';
    const job = await taker.getNextJob(token);
    expect(job).toBeDefined();

    const metrics = createFleetMetrics({ queue, defaultMetrics: false });
    const server = await startMetricsServer({ port: 0, host: '127.0.0.1', registry: metrics.registry, ready: () => true, healthy: () => true });
    try {
      const m = await scrape(server);
      const q = `{queue="${QUEUE}"}`;
      // BullMQ takes jobs without a priority first: the active one came from the wait list
      const jobs = (state: string) => m.get(`kmfleet_queue_jobs{queue="${QUEUE}",state="${state}"}`);
      expect(jobs('waiting')).toBe(2);
      expect(jobs('prioritized')).toBe(2);
      expect(jobs('delayed')).toBe(1);
      expect(jobs('active')).toBe(1);
      // one gauge with a state label: no gauge per state
      expect([...m.keys()].filter((k) => k.startsWith('kmfleet_queue_') && !/^kmfleet_queue_(jobs|pending|up|scrape_errors_total)\{/.test(k))).toEqual([]);
      expect(m.get(`kmfleet_queue_pending${q}`)).toBe(5);
      expect(m.get(`kmfleet_queue_up${q}`)).toBe(1);
      expect(m.get(`kmfleet_queue_scrape_errors_total${q}`)).toBe(0);
      // and the read matches BullMQ's own counts
      const direct = await queue.getJobCounts('waiting', 'prioritized', 'active');
      expect(m.get(`kmfleet_queue_pending${q}`)).toBe(direct.waiting + direct.prioritized + direct.active);

      // the gauges refresh on each scrape: finish the active job, the pending count drops
      await job!.moveToCompleted('done', token, false);
      const m2 = await scrape(server);
      expect(m2.get(`kmfleet_queue_jobs{queue="${QUEUE}",state="active"}`)).toBe(0);
      expect(m2.get(`kmfleet_queue_pending${q}`)).toBe(4);
    } finally {
      await server.close();
      await taker.close();
      await queue.obliterate({ force: true });
    }
  });

  it('records the worker API: jobs by outcome, durations, throughput, bytes, checkpoints, device', async () => {
    const metrics = createFleetMetrics({ defaultMetrics: false });
    const server = await startMetricsServer({ port: 0, host: '127.0.0.1', registry: metrics.registry, ready: () => true, healthy: () => true });
    try {
      const before = await scrape(server);
      expect(before.get('kmfleet_jobs_total{outcome="completed"}')).toBe(0);
      expect(before.get('kmfleet_jobs_total{outcome="released"}')).toBe(0);
      // without a queue there are no queue gauges (the exporter serves them)
      expect([...before.keys()].some((k) => k.startsWith('kmfleet_queue_'))).toBe(false);

      const a = metrics.jobStarted();
      expect((await scrape(server)).get('kmfleet_jobs_in_progress')).toBe(1);
      metrics.deviceInfo({ backend: 'cuda', device: 'NVIDIA H100', computeCapability: '9.0', driver: '13.0' });
      metrics.s3BytesRead(1000);
      metrics.s3BytesRead(24);
      metrics.iterationDone(250, 1_000_000);
      metrics.iterationDone(500, 1_000_000);
      metrics.checkpointWritten(120);
      metrics.deviceMemoryUsed(3 * 2 ** 30, '0');
      metrics.deviceMemoryUsed(2 ** 30, '1');
      metrics.deviceInfo({ backend: 'cuda', device: 'NVIDIA H100', computeCapability: '9.0', driver: '13.0' }); // same: one series
      a.end('completed');
      a.end('failed'); // ignored: a job ends once
      metrics.jobStarted().end('released');

      const m = await scrape(server);
      expect(m.get('kmfleet_jobs_started_total')).toBe(2);
      expect(m.get('kmfleet_jobs_in_progress')).toBe(0);
      expect(m.get('kmfleet_jobs_total{outcome="completed"}')).toBe(1);
      expect(m.get('kmfleet_jobs_total{outcome="released"}')).toBe(1);
      expect(m.get('kmfleet_jobs_total{outcome="failed"}')).toBe(0);
      expect(m.get('kmfleet_job_duration_seconds_count{outcome="completed"}')).toBe(1);
      expect(m.get('kmfleet_s3_bytes_read_total')).toBe(1024);
      expect(m.get('kmfleet_iterations_total')).toBe(2);
      expect(m.get('kmfleet_rows_processed_total')).toBe(2_000_000);
      expect(m.get('kmfleet_rows_per_second')).toBe(2_000_000); // the last iteration: 1e6 rows in 0.5 s
      expect(m.get('kmfleet_iteration_duration_seconds_count')).toBe(2);
      expect(m.get('kmfleet_iteration_duration_seconds_sum')).toBeCloseTo(0.75, 9);
      expect(m.get('kmfleet_iteration_duration_seconds_bucket{le="0.25"}')).toBe(1);
      expect(m.get('kmfleet_checkpoint_duration_seconds_sum')).toBeCloseTo(0.12, 9);
      expect(m.get('kmfleet_device_memory_used_bytes{device="0"}')).toBe(3 * 2 ** 30);
      expect(m.get('kmfleet_device_memory_used_bytes{device="1"}')).toBe(2 ** 30);
      expect([...m.keys()].filter((k) => k.startsWith('kmfleet_device_info{'))).toHaveLength(1);
      expect(
        m.get('kmfleet_device_info{backend="cuda",device="NVIDIA H100",compute_capability="9.0",driver="13.0"}'),
      ).toBe(1);

      expect(() => metrics.iterationDone(Number.NaN, 1)).toThrow(RangeError);
      expect(() => metrics.s3BytesRead(-1)).toThrow(RangeError);
    } finally {
      await server.close();
    }
  });

  it('answers /healthz and /readyz from the checks, 503 when a check fails or throws, 404/405 otherwise', async () => {
    let ready = false;
    let healthy = true;
    const metrics = createFleetMetrics({ defaultMetrics: false });
    const server = await startMetricsServer({
      port: 0,
      host: '127.0.0.1',
      registry: metrics.registry,
      ready: () => ready,
      healthy: async () => {
        if (!healthy) throw new Error('wedged');
        return true;
      },
    });
    try {
      expect((await fetch(`${server.url}/readyz`)).status).toBe(503);
      expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
      ready = true;
      expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
      healthy = false;
      expect((await fetch(`${server.url}/healthz`)).status).toBe(503);
      expect((await fetch(`${server.url}/healthz`, { method: 'HEAD' })).status).toBe(503);
      expect((await fetch(`${server.url}/nope`)).status).toBe(404);
      expect((await fetch(`${server.url}/metrics`, { method: 'POST' })).status).toBe(405);
    } finally {
      await server.close();
    }
  });

  it('the queue exporter serves the gauges, and reports Redis going away as up=0 with no pending sample', async () => {
    const own = await startRedisServer();
    const q = new Queue('exported', { connection: own.connection, prefix: '{kmfleet}' });
    await q.add('fit', {});
    await q.add('fit', {}, { priority: 2 });
    const exporter = await startQueueExporter({ redis: own.url, queue: 'exported', port: 0, host: '127.0.0.1' });
    try {
      // ready once Redis answers
      for (let i = 0; i < 100 && (await fetch(`${exporter.server.url}/readyz`)).status !== 200; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect((await fetch(`${exporter.server.url}/readyz`)).status).toBe(200);
      const m = await scrape(exporter.server);
      expect(m.get('kmfleet_queue_pending{queue="exported"}')).toBe(2);
      expect(m.get('kmfleet_queue_jobs{queue="exported",state="prioritized"}')).toBe(1);
      // queue gauges and process metrics only: the exporter must not look like a worker on a dashboard
      expect([...m.keys()].filter((k) => k.startsWith('kmfleet_') && !k.startsWith('kmfleet_queue_'))).toEqual([]);
      expect(m.has('process_cpu_user_seconds_total')).toBe(true);

      await q.close();
      await own.kill('SIGKILL');
      const down = await scrape(exporter.server); // the scrape itself still answers 200
      expect(down.get('kmfleet_queue_up{queue="exported"}')).toBe(0);
      expect(down.has('kmfleet_queue_pending{queue="exported"}')).toBe(false);
      expect([...down.keys()].some((k) => k.startsWith('kmfleet_queue_jobs'))).toBe(false);
      expect(down.get('kmfleet_queue_scrape_errors_total{queue="exported"}')).toBeGreaterThanOrEqual(1);
      expect((await fetch(`${exporter.server.url}/healthz`)).status).toBe(200);
    } finally {
      await exporter.close();
      await own.stop();
    }
  });
});
