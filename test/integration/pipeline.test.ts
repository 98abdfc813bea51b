/**
 * End to end on real servers and the real engine: enqueue through the SDK → worker → outputs in S3, equal bit for bit
 * to the driver run on the same file with the same seed and chunk size; with a local cache and a small memory budget
 * (later passes read the cache, S3 is read once); and a cancel from another process.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../native/index.js';
import { JobCancelledError } from '../../producer/errors/index.js';
import { readIterations } from '../../producer/job-state.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { bytesOf, ensureDistBuilt, referenceFit, spawnWorker, startStack, until, type Stack } from './pipeline-fixture.js';

const ENGINE = { chunkRows: 4096, threads: 2 };
const WORKER_ENV = { KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows), KMFLEET_THREADS: String(ENGINE.threads) };

describe('pipeline: SDK → queue → worker → S3', () => {
  let stack: Stack;
  let dir: string;
  let blobs: string;
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-pipeline-'));
    blobs = (await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: 30_000, dims: 16, centers: 12, seed: 11, clusterStd: 3 })).path;
    await stack.s3.put('data', 'blobs.npy', readFileSync(blobs));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('outputs equal the driver run on the same file bit for bit; summary.json is complete and checksummed', async () => {
    const worker = await stack.startWorker(WORKER_ENV);
    const spec = { k: 12, maxIter: 50, seed: 4 };
    await stack.client.enqueue(
      { dataset: { uri: 's3://data/blobs.npy' }, ...spec, backend: 'cpu', output: 's3://out/runs/', name: 'blobs-model' },
      { jobId: 'e2e-1' },
    );
    const progress: number[] = [];
    const result = await stack.client.wait('e2e-1', { timeoutMs: 60_000, pollMs: 20, onProgress: (p) => p && progress.push(p.iteration) });
    const ref = await referenceFit(blobs, spec, ENGINE);

    const centroids = decodeNpy(await stack.s3.get('out', 'runs/e2e-1/centroids.npy'));
    expect(centroids.shape).toEqual([12, 16]);
    expect(bytesOf(centroids.data).equals(bytesOf(ref.centroids))).toBe(true);
    const assignments = decodeNpy(await stack.s3.get('out', 'runs/e2e-1/assignments.npy'));
    expect(assignments.descr).toBe('<i4');
    expect(bytesOf(assignments.data).equals(bytesOf(ref.labels))).toBe(true);
    expect(result.iterations).toBe(ref.iterations);
    expect(result.inertia).toBe(ref.inertia);
    // small datasets stay in memory after their first read: k-means++ and the first pass download it once
    expect(result.timings.s3BytesRead).toBe(30_000 * 16 * 4);

    const summary = JSON.parse((await stack.s3.get('out', 'runs/e2e-1/summary.json')).toString('utf8'));
    expect(summary).toMatchObject({
      jobId: 'e2e-1',
      dataset: { uri: 's3://data/blobs.npy', rows: 30_000, dims: 16, format: 'npy' },
      iterations: ref.iterations,
      backend: 'cpu',
      precision: 'fp32',
      outputs: { prefix: 's3://out/runs/e2e-1', centroids: 's3://out/runs/e2e-1/centroids.npy' },
    });
    expect(summary.dataset.etag).toMatch(/^".+"$/);
    expect(summary.history).toHaveLength(ref.iterations);
    expect(summary.clusterSizes.reduce((a: number, b: number) => a + b, 0)).toBe(30_000);
    for (const name of ['centroids.npy', 'assignments.npy']) {
      const sha = createHash('sha256').update(await stack.s3.get('out', `runs/e2e-1/${name}`)).digest('hex');
      expect(summary.checksums[name]).toBe(`sha256:${sha}`);
    }
    // checkpoints are gone once the outputs are committed; the iteration stream and the model history are in Redis
    expect(stack.s3.keys('out', 'runs/e2e-1/')).toEqual(['runs/e2e-1/assignments.npy', 'runs/e2e-1/centroids.npy', 'runs/e2e-1/summary.json']);
    const iterations = await readIterations(await stack.client.connection(), stack.client.keys, 'e2e-1');
    expect(iterations.map((r) => r.iteration)).toEqual(Array.from({ length: ref.iterations }, (_, i) => i + 1));
    expect((await stack.client.latest('blobs-model'))?.jobId).toBe('e2e-1');
    expect(progress.at(-1)).toBe(ref.iterations);
    await worker.shutdown();
  });

  it('init "previous" warm-starts from the model\'s latest centroids; distances.npy when configured', async () => {
    const worker = await stack.startWorker({ ...WORKER_ENV, KMFLEET_WRITE_DISTANCES: 'true' });
    try {
      const first = await stack.client.latest('blobs-model');
      await stack.client.enqueue(
        { dataset: { uri: 's3://data/blobs.npy' }, k: 12, maxIter: 50, seed: 99, init: 'previous', name: 'blobs-model', backend: 'cpu', output: 's3://out/warm' },
        { jobId: 'warm-1' },
      );
      const result = await stack.client.wait('warm-1', { timeoutMs: 60_000 });
      expect(result.initFrom).toBe(first!.outputs.centroids);
      // started from converged centroids: it stops after one iteration
      expect(result.iterations).toBe(1);
      expect(result.converged).toBe(true);
      const distances = decodeNpy(await stack.s3.get('out', 'warm/warm-1/distances.npy'));
      expect(distances.descr).toBe('<f4');
      expect(distances.shape).toEqual([30_000]);
      const sum = Array.from(distances.data as Float32Array).reduce((a, b) => a + b, 0);
      expect(sum / result.inertia).toBeCloseTo(1, 3);
      expect(result.checksums?.['distances.npy']).toMatch(/^sha256:/);
      expect((await stack.client.latest('blobs-model'))?.jobId).toBe('warm-1');
    } finally {
      await worker.shutdown();
    }
  });

  it('with a local cache and a small memory budget: S3 is read once, the pod keeps the file, and the next job reads no S3', async () => {
    const cacheDir = join(dir, 'cache');
    const worker = await stack.startWorker({ ...WORKER_ENV, KMFLEET_CACHE_DIR: cacheDir, KMFLEET_GPU_MEMORY: '1M', KMFLEET_HOST_MEMORY: '0' });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/blobs.npy' }, k: 12, maxIter: 50, seed: 4, backend: 'cpu', output: 's3://out/cached' }, { jobId: 'e2e-cache' });
      const result = await stack.client.wait('e2e-cache', { timeoutMs: 60_000 });
      expect(readdirSync(cacheDir).filter((f) => f.endsWith('.rows'))).toHaveLength(1);
      const first = decodeNpy(await stack.s3.get('out', 'runs/e2e-1/centroids.npy'));
      const cached = decodeNpy(await stack.s3.get('out', 'cached/e2e-cache/centroids.npy'));
      expect(bytesOf(cached.data).equals(bytesOf(first.data))).toBe(true);
      expect(result.iterations).toBeGreaterThan(1);
      // the data part of the file once (+ the header probe), whatever the number of passes
      expect(result.timings.s3BytesRead).toBe(30_000 * 16 * 4);
      // the file was written beside the job (cache-filler.ts): a later job on the pod reads it, not S3, same bits
      await stack.client.enqueue({ dataset: { uri: 's3://data/blobs.npy' }, k: 12, maxIter: 50, seed: 4, backend: 'cpu', output: 's3://out/cached' }, { jobId: 'e2e-cache-warm' });
      const warm = await stack.client.wait('e2e-cache-warm', { timeoutMs: 60_000 });
      expect(warm.timings.s3BytesRead).toBe(0);
      const again = decodeNpy(await stack.s3.get('out', 'cached/e2e-cache-warm/centroids.npy'));
      expect(bytesOf(again.data).equals(bytesOf(first.data))).toBe(true);
    } finally {
      await worker.shutdown();
    }
  });

  it('KMFLEET_CACHE_MAX_GB: caching a new dataset evicts the cached file used least recently', async () => {
    const cacheDir = join(dir, 'cache-capped');
    mkdirSync(cacheDir);
    // an earlier dataset's file of 1.5 GiB (sparse: no disk used), last used a day ago
    const old = join(cacheDir, `${'0'.repeat(40)}.rows`);
    writeFileSync(old, '');
    truncateSync(old, 1.5 * 2 ** 30);
    const dayAgo = new Date(Date.now() - 86_400_000);
    utimesSync(old, dayAgo, dayAgo);
    const worker = await stack.startWorker({ ...WORKER_ENV, KMFLEET_CACHE_DIR: cacheDir, KMFLEET_CACHE_MAX_GB: '1' });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/blobs.npy' }, k: 12, maxIter: 5, seed: 4, backend: 'cpu', output: 's3://out/capped' }, { jobId: 'e2e-cache-cap' });
      await stack.client.wait('e2e-cache-cap', { timeoutMs: 60_000 });
      const files = readdirSync(cacheDir);
      expect(files).toHaveLength(1);
      expect(files[0]).toMatch(/^[0-9a-f]{40}\.rows$/);
      expect(files[0]).not.toBe(`${'0'.repeat(40)}.rows`);
    } finally {
      await worker.shutdown();
    }
  });
});

describe('pipeline: cancel from another process', () => {
  let stack: Stack;
  let dir: string;
  beforeAll(async () => {
    ensureDistBuilt();
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-cancel-'));
    const data = await generateDataset(join(dir, 'normal.npy'), { kind: 'normal', rows: 100_000, dims: 32, seed: 3 });
    await stack.s3.put('data', 'normal.npy', readFileSync(data.path));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a running job ends failed "cancelled" within about a second, is not retried, and leaves no outputs', async () => {
    const child = spawnWorker(stack.env(WORKER_ENV));
    try {
      await stack.client.enqueue(
        { dataset: { uri: 's3://data/normal.npy' }, k: 64, maxIter: 300, tol: 0, seed: 1, backend: 'cpu', output: 's3://out/runs' },
        { jobId: 'to-cancel' },
      );
      await until(async () => ((await stack.client.get('to-cancel'))?.progress?.iteration ?? 0) >= 2, 30_000, 'iteration 2');
      const t0 = Date.now();
      expect((await stack.client.cancel('to-cancel')).outcome).toBe('signalled');
      const err = await stack.client.wait('to-cancel', { timeoutMs: 10_000, pollMs: 20 }).catch((e) => e);
      const ms = Date.now() - t0;
      expect(err).toBeInstanceOf(JobCancelledError);
      expect(ms).toBeLessThan(2_000);
      const info = await stack.client.get('to-cancel');
      expect(info).toMatchObject({ state: 'failed', failedReason: 'cancelled', attemptsMade: 1 });
      expect(stack.s3.keys('out', 'runs/to-cancel/')).toEqual([]);
    } finally {
      child.kill('SIGTERM');
      await child.exited;
    }
  });

  it("releases the engine's memory: a cancelled job's engine is closed and its host buffers detached", async () => {
    const opened: Engine[] = [];
    const worker = await stack.startWorker({ ...WORKER_ENV, KMFLEET_THREADS: '1' }, {
      openEngine: async (o) => {
        const e = await Engine.open(o);
        opened.push(e);
        return e;
      },
    });
    try {
      await stack.client.enqueue(
        { dataset: { uri: 's3://data/normal.npy' }, k: 64, maxIter: 300, tol: 0, seed: 1, backend: 'cpu', output: 's3://out/runs' },
        { jobId: 'to-cancel-2' },
      );
      await until(async () => ((await stack.client.get('to-cancel-2'))?.progress?.iteration ?? 0) >= 2, 30_000, 'iteration 2');
      const buffer = opened[0].buffer(0);
      expect(buffer.length).toBeGreaterThan(0);
      await stack.client.cancel('to-cancel-2');
      await expect(stack.client.wait('to-cancel-2', { timeoutMs: 10_000, pollMs: 20 })).rejects.toBeInstanceOf(JobCancelledError);
      expect(opened).toHaveLength(1);
      await until(async () => buffer.length === 0, 5_000, 'engine closed'); // close() detaches the engine's Buffers
      expect(() => opened[0].buffer(0)).toThrow();
    } finally {
      await worker.shutdown('test end');
    }
  });
});
