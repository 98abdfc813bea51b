/**
 * The metrics as the real worker produces them: a worker (startWorker, the real engine on the cpu backend) with its
 * metrics server on a random port, a real redis-server and s3rver, one job through the SDK; then /metrics over HTTP
 * must show what happened (job outcome, iterations, rows, S3 bytes, checkpoints, device), and the queue exporter
 * must see the queue empty again. Checks the wiring between worker/ and worker/metrics/, not the engine.
 */
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { startQueueExporter, type QueueExporter } from '../../worker/metrics/index.js';
import { parsePrometheus } from '../helpers/prometheus.js';
import { freePort } from '../helpers/redis-server.js';
import { startStack, until, type Stack } from './pipeline-fixture.js';

const ROWS = 6_000;
const DIMS = 8;

describe('worker metrics, end to end', () => {
  let stack: Stack;
  let dir: string;
  let exporter: QueueExporter;

  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-metrics-worker-'));
    const file = (await generateDataset(join(dir, 'm.npy'), { kind: 'blobs', rows: ROWS, dims: DIMS, centers: 5, seed: 3, clusterStd: 1 })).path;
    await stack.s3.put('data', 'm.npy', readFileSync(file));
    exporter = await startQueueExporter({ redis: stack.redis.url, port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await exporter?.close();
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a completed job shows up in the worker metrics and leaves the queue gauges at zero', async () => {
    const port = await freePort();
    const worker = await stack.startWorker({ KMFLEET_METRICS_PORT: String(port), KMFLEET_CHUNK_ROWS: '1024', KMFLEET_THREADS: '2' });
    expect(worker.metricsServer?.port).toBe(port);
    const url = `http://127.0.0.1:${port}`;
    await until(async () => (await fetch(`${url}/readyz`)).status === 200, 10_000, 'worker ready');
    expect((await fetch(`${url}/healthz`)).status).toBe(200);

    await stack.client.enqueue(
      { dataset: { uri: 's3://data/m.npy' }, k: 5, maxIter: 20, seed: 1, backend: 'cpu', output: 's3://out/metrics/', checkpointEvery: 1 },
      { jobId: 'metrics-1' },
    );
    const result = await stack.client.wait('metrics-1', { timeoutMs: 60_000, pollMs: 20 });

    const m = parsePrometheus(await (await fetch(`${url}/metrics`)).text());
    expect(m.get('kmfleet_jobs_started_total')).toBe(1);
    expect(m.get('kmfleet_jobs_total{outcome="completed"}')).toBe(1);
    expect(m.get('kmfleet_jobs_total{outcome="failed"}')).toBe(0);
    expect(m.get('kmfleet_jobs_in_progress')).toBe(0);
    expect(m.get('kmfleet_job_duration_seconds_count{outcome="completed"}')).toBe(1);
    expect(m.get('kmfleet_iterations_total')).toBe(result.iterations);
    expect(m.get('kmfleet_iteration_duration_seconds_count')).toBe(result.iterations);
    expect(m.get('kmfleet_rows_processed_total')).toBe(result.iterations * ROWS);
    expect(m.get('kmfleet_rows_per_second')).toBeGreaterThan(0);
    expect(m.get('kmfleet_s3_bytes_read_total')).toBeGreaterThanOrEqual(ROWS * DIMS * 4);
    expect(m.get('kmfleet_checkpoint_duration_seconds_count')).toBeGreaterThanOrEqual(1);
    const device = [...m.entries()].filter(([k]) => k.startsWith('kmfleet_device_info{'));
    expect(device).toHaveLength(1);
    expect(device[0][0]).toContain('backend="cpu"');
    expect(device[0][1]).toBe(1);
    // the process metrics come along (default metrics on)
    expect(m.has('process_cpu_user_seconds_total')).toBe(true);

    const q = parsePrometheus(await (await fetch(`${exporter.server.url}/metrics`)).text());
    expect(q.get('kmfleet_queue_pending{queue="jobs"}')).toBe(0);
    expect(q.get('kmfleet_queue_up{queue="jobs"}')).toBe(1);

    await worker.shutdown('test end');
    // the server is closed with the worker: nothing left listening on the port
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
  });
});
