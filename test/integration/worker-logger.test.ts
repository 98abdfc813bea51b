/**
 * Worker log lines: every line about a job carries its id and attempt; credentials never reach a line.
 */
import { hostname } from 'node:os';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { loadWorkerConfig, WorkerConfigError } from '../../worker/config.js';
import { createLogger, jobLogger } from '../../worker/logger.js';

function capture() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { lines, stream };
}

describe('worker logger and config', () => {
  it('job lines carry jobId, attempt and the host; secrets are redacted', () => {
    const { lines, stream } = capture();
    const log = createLogger({ level: 'debug', destination: stream });
    const job = jobLogger(log, 'job-7', 2);
    job.info({ s3: { credentials: { accessKeyId: 'AKIA', secretAccessKey: 'shh' } }, redis: { password: 'pw' } }, 'started');
    job.child({ phase: 'iterate' }).debug({ iteration: 1 }, 'iteration');
    expect(lines).toHaveLength(2);
    for (const l of lines) expect(l).toMatchObject({ jobId: 'job-7', attempt: 2, name: 'kmfleet-worker', hostname: hostname(), pid: process.pid });
    // without tracing, no trace fields
    for (const l of lines) expect(l).not.toHaveProperty('trace_id');
    const text = JSON.stringify(lines);
    expect(text).not.toContain('shh');
    expect(text).not.toContain('"pw"');
    expect(text).toContain('[redacted]');
  });

  it('config from env: defaults, overrides, and every bad variable named at once', () => {
    const c = loadWorkerConfig({ REDIS_URL: 'redis://:pw@h:6380/2', KMFLEET_S3_ENDPOINT: 'http://minio:9000', KMFLEET_CONCURRENCY: '2' });
    expect(c.redis).toMatchObject({ host: 'h', port: 6380, db: 2, password: 'pw' });
    expect(c.s3).toMatchObject({ endpoint: 'http://minio:9000', forcePathStyle: true, compat: 'none' });
    expect(c).toMatchObject({ concurrency: 2, queue: 'jobs', prefix: 'kmfleet', lockDurationMs: 30_000, shutdownGraceMs: 25_000, metricsPort: 9464 });
    expect(c.readPartBytes).toBe(16 * 1024 * 1024);
    const err = (() => {
      try {
        loadWorkerConfig({ KMFLEET_CONCURRENCY: '0', KMFLEET_S3_COMPAT: 'minio', KMFLEET_WRITE_DISTANCES: 'maybe' });
      } catch (e) {
        return e as Error;
      }
    })();
    expect(err).toBeInstanceOf(WorkerConfigError);
    expect(err!.message).toMatch(/KMFLEET_CONCURRENCY must be an integer ≥ 1/);
    expect(err!.message).toMatch(/KMFLEET_S3_COMPAT must be 'none' or 's3rver'/);
    expect(err!.message).toMatch(/KMFLEET_WRITE_DISTANCES must be true or false/);
  });
});
