/**
 * Shared set-up of the pipeline and worker tests: a real redis-server and a real s3rver on random loopback ports,
 * worker configuration built from an env object (as a pod would get it), the producer SDK, and helpers to run a worker
 * in this process or in a child process (node on the compiled dist/, so that SIGKILL / SIGTERM hit a real process).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { expect } from 'vitest';
import { JobFailedError } from '../../producer/errors/index.js';
import { KmfleetClient } from '../../producer/client.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { loadWorkerConfig, type WorkerConfig } from '../../worker/config.js';
import { startWorker, type KmfleetWorker, type StartWorkerOptions } from '../../worker/worker.js';
import { startRedisServer, type RedisServerHandle, type RedisServerOptions } from '../helpers/redis-server.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';

export const ROOT = join(import.meta.dirname, '..', '..');

/** The compiled `kmfleet` command, run to completion from the repository root. */
export function kmfleet(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'kmfleet.js'), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The data bytes of a .npy file (its header left out). */
export const npyData = (file: string): Buffer => bytesOf(decodeNpy(readFileSync(file)).data);

export interface Stack {
  redis: RedisServerHandle;
  s3: S3ServerHandle;
  client: KmfleetClient;
  /** env for a worker (in-process config or a child process) */
  env(extra?: Record<string, string>): Record<string, string>;
  config(extra?: Record<string, string>): WorkerConfig;
  startWorker(extra?: Record<string, string>, opts?: StartWorkerOptions): Promise<KmfleetWorker>;
  stop(): Promise<void>;
}

export async function startStack(opts: { redis?: RedisServerOptions; clientJobOptions?: Record<string, unknown> } = {}): Promise<Stack> {
  const [redis, s3] = await Promise.all([startRedisServer(opts.redis), startS3Server({ buckets: ['data', 'out'] })]);
  const client = new KmfleetClient({ connection: redis.url, jobOptions: { attempts: 3, backoff: { type: 'fixed', delay: 200 }, ...opts.clientJobOptions } });
  const workers: KmfleetWorker[] = [];
  const env = (extra: Record<string, string> = {}) => ({
    REDIS_URL: redis.url,
    ...s3.env,
    KMFLEET_METRICS_PORT: '0',
    KMFLEET_LOG_LEVEL: process.env.KMFLEET_TEST_LOG_LEVEL ?? 'silent',
    KMFLEET_THREADS: '2',
    // the tests' jobs iterate in milliseconds: checkpoint after every iteration, as the fault tests expect
    KMFLEET_CHECKPOINT_MIN_INTERVAL_MS: '0',
    ...extra,
  });
  const config = (extra: Record<string, string> = {}) => loadWorkerConfig(env(extra));
  return {
    redis,
    s3,
    client,
    env,
    config,
    async startWorker(extra = {}, o = {}) {
      const c = config(extra);
      const w = await startWorker(c, { s3: s3.handle, logger: pino({ level: c.logLevel }), ...o });
      workers.push(w);
      return w;
    },
    async stop() {
      await Promise.all(workers.map((w) => w.shutdown('test end').catch(() => {})));
      await client.close().catch(() => {});
      await Promise.all([s3.stop(), redis.stop()]);
    },
  };
}

/** A worker in a child process: `node dist/cli/main.js worker` via bin/kmfleet.js, on the compiled build. */
export interface ChildWorker {
  proc: ChildProcess;
  output(): string;
  /** resolves with the exit code (or signal) */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal: NodeJS.Signals): void;
}

export { distBuilt, ensureDistBuilt } from '../helpers/dist-build.js';

export function spawnWorker(env: Record<string, string>): ChildWorker {
  const proc = spawn(process.execPath, [join(ROOT, 'bin', 'kmfleet.js'), 'worker'], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => resolve({ code, signal })),
  );
  process.once('exit', () => proc.kill('SIGKILL'));
  return { proc, output: () => out, exited, kill: (s) => proc.kill(s) };
}

/** Poll until `fn` returns a truthy value (or throw after timeoutMs). */
export async function until<T>(fn: () => Promise<T | undefined | null | false>, timeoutMs = 20_000, what = 'condition'): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Run the driver on a local copy of the dataset with the engine options the worker uses: the reference result. */
export async function referenceFit(
  path: string,
  spec: { k: number; maxIter: number; tol?: number; tolReassign?: number; seed: number; init?: 'kmeans++' | 'random' },
  engine: { chunkRows: number; threads: number },
): Promise<{ centroids: Float32Array; labels: Int32Array; iterations: number; inertia: number }> {
  const { Engine } = await import('../../native/index.js');
  const { LocalFileSource } = await import('../../core/dataset/local-file-source.js');
  const { runKmeans } = await import('../../core/kmeans/driver.js');
  const source = await LocalFileSource.open(path);
  const eng = await Engine.open({
    rows: source.rows, dims: source.dims, k: spec.k, metric: 'l2', dtype: source.dtype, backend: 'cpu', precision: 'auto',
    chunkRows: engine.chunkRows, threads: engine.threads,
  });
  try {
    const r = await runKmeans({
      engine: eng, source,
      spec: { k: spec.k, metric: 'l2', init: spec.init ?? 'kmeans++', maxIter: spec.maxIter, tol: spec.tol ?? 1e-4, tolReassign: spec.tolReassign ?? 0, seed: spec.seed },
    });
    return { centroids: r.centroids, labels: eng.labels(), iterations: r.iterations, inertia: r.inertia };
  } finally {
    eng.close();
    await source.close();
  }
}

/**
 * A job's iteration stream, raw, against iterations 1..maxIter: the ones missing, those repeated at or before the
 * resume point (only a resume redoes iterations, those after its checkpoint) and any outside the range.
 */
export async function iterationStreamDefects(
  stack: Stack,
  jobId: string,
  maxIter: number,
  resumedAt = Infinity,
): Promise<{ raw: number[]; missing: number[]; strayRepeats: number[]; extra: number[] }> {
  const redis = await stack.client.connection();
  const raw = (await redis.xrange(stack.client.keys.iterations(jobId), '-', '+')).map(([, f]) => Number(f[f.indexOf('iteration') + 1]));
  const seen = new Map<number, number>();
  for (const it of raw) seen.set(it, (seen.get(it) ?? 0) + 1);
  return {
    raw,
    missing: Array.from({ length: maxIter }, (_, i) => i + 1).filter((i) => !seen.has(i)),
    strayRepeats: [...seen].filter(([it, n]) => n > 1 && it <= resumedAt).map(([it]) => it),
    extra: [...seen.keys()].filter((i) => i < 1 || i > maxIter),
  };
}

/**
 * The job completed exactly once: state completed, one result in `model`'s history, the three outputs under
 * `bucket/prefix/jobId/` (checkpoints aside), their bytes those of the reference fit of `path`.
 */
export async function expectCompletedOnce(
  stack: Stack,
  o: { jobId: string; output: string; model: string; path: string; spec: Parameters<typeof referenceFit>[1]; engine: Parameters<typeof referenceFit>[2] },
): Promise<void> {
  const { jobId } = o;
  const [bucket, prefix] = o.output.replace(/^s3:\/\//, '').split(/\/(.*)/s);
  expect((await stack.client.get(jobId))?.state).toBe('completed');
  expect((await stack.client.history(o.model)).map((h) => h.jobId)).toEqual([jobId]);
  const dir = `${prefix}/${jobId}/`;
  expect(stack.s3.keys(bucket, dir).filter((k) => !k.includes('/_checkpoints/'))).toEqual(
    [`${dir}assignments.npy`, `${dir}centroids.npy`, `${dir}summary.json`],
  );
  const ref = await referenceFit(o.path, o.spec, o.engine);
  expect(bytesOf(decodeNpy(await stack.s3.get(bucket, `${dir}centroids.npy`)).data).equals(bytesOf(ref.centroids))).toBe(true);
  expect(bytesOf(decodeNpy(await stack.s3.get(bucket, `${dir}assignments.npy`)).data).equals(bytesOf(ref.labels))).toBe(true);
}

export function bytesOf(a: ArrayBufferView): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

/**
 * The dataset-format tests' rows: python lines that set d = sys.argv[1], draw `rows` float32 rows around k centers
 * (numpy, seed 7: rng, centers and x stay defined for lines after them) and save them as d/x.npy.
 */
export function blobsPython(rows: number, dims: number, k: number): string[] {
  return [
    'import numpy as np, sys',
    'd = sys.argv[1]',
    'rng = np.random.default_rng(7)',
    `centers = rng.normal(scale=10.0, size=(${k}, ${dims}))`,
    `x = (centers[rng.integers(0, ${k}, size=${rows})] + rng.normal(size=(${rows}, ${dims}))).astype(np.float32)`,
    'np.save(d + "/x.npy", x)',
  ];
}

type JobResult = Awaited<ReturnType<Stack['client']['wait']>>;

/** A job's centroids and assignments under s3://out/<prefix>/<job>/. */
export async function jobOutputs(stack: Stack, prefix: string, job: string): Promise<{ centroids: Buffer; assignments: Buffer }> {
  const get = async (f: string) => bytesOf(decodeNpy(await stack.s3.get('out', `${prefix}/${job}/${f}`)).data);
  return { centroids: await get('centroids.npy'), assignments: await get('assignments.npy') };
}

/** Each job gave the reference job's outputs, iterations and inertia, over `rows` rows of `dims`. */
export async function expectSameJobOutputs(stack: Stack, prefix: string, results: Record<string, JobResult>, reference: string,
  jobs: readonly string[], shape: { rows: number; dims: number }): Promise<void> {
  const want = await jobOutputs(stack, prefix, reference);
  for (const job of jobs) {
    const got = await jobOutputs(stack, prefix, job);
    expect(got.centroids.equals(want.centroids), `${job} centroids`).toBe(true);
    expect(got.assignments.equals(want.assignments), `${job} assignments`).toBe(true);
    expect(results[job].iterations, job).toBe(results[reference].iterations);
    expect(results[job].inertia, job).toBe(results[reference].inertia);
    expect(results[job].dataset, job).toMatchObject(shape);
  }
}

/** Enqueues each job (k clusters, outputs under s3://out/<prefix>) and expects it to fail in its first attempt, its
 * reason matching the pattern: bad input, named, is never retried. */
export async function expectFailsAtOnce(stack: Stack, prefix: string, k: number, cases: readonly [string, Record<string, unknown>, RegExp][]): Promise<void> {
  for (const [id, dataset] of cases) await stack.client.enqueue({ dataset, k, output: `s3://out/${prefix}` }, { jobId: id });
  for (const [id, , message] of cases) {
    const err = await stack.client.wait(id, { timeoutMs: 60_000 }).catch((e: unknown) => e);
    expect(err, id).toBeInstanceOf(JobFailedError);
    expect((err as JobFailedError).failedReason, id).toMatch(message);
    expect((err as JobFailedError).attemptsMade, id).toBe(1);
  }
}
