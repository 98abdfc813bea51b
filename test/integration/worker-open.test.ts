/**
 * Step 2 of a job (claim, output bucket check, dataset open, progress) on real Redis, s3rver and engine: the dataset's
 * download starts as soon as its header is read, without waiting for the other round trips, and when several fail the
 * error named is still the output bucket's before the dataset's.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { createS3 } from '../../worker/s3/client.js';
import { delay, startS3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { startStack, type Stack } from './pipeline-fixture.js';

describe('worker: opening a job', () => {
  let stack: Stack;
  let dir: string;
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-open-'));
    const blobs = await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: 20_000, dims: 8, centers: 5, seed: 2, clusterStd: 2 });
    await stack.s3.put('data', 'blobs.npy', readFileSync(blobs.path));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the download does not wait for a slow output bucket check', async () => {
    const arrivals: { what: string; at: number }[] = [];
    const proxy = await startS3FaultProxy(stack.s3, {
      fault: (r) => {
        const range = String(r.headers.range ?? '');
        arrivals.push({ what: r.operation === 'BucketRequest' ? `bucket ${r.bucket}` : `${r.operation} ${range}`, at: Date.now() });
        return r.operation === 'BucketRequest' && r.bucket === 'out' ? delay(1000) : undefined;
      },
    });
    const s3 = createS3(proxy.settings);
    const worker = await stack.startWorker({ KMFLEET_THREADS: '2' }, { s3 });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/blobs.npy' }, k: 5, maxIter: 3, seed: 1, backend: 'cpu', output: 's3://out/open' }, { jobId: 'open-1' });
      await stack.client.wait('open-1', { timeoutMs: 30_000, pollMs: 20 });
      const bucket = arrivals.find((a) => a.what === 'bucket out');
      // the blocks of the memory cache: ranged GETs after the header probe (bytes=0-…)
      const block = arrivals.find((a) => a.what.startsWith('GetObject bytes=') && !a.what.startsWith('GetObject bytes=0-'));
      expect(bucket).toBeDefined();
      expect(block).toBeDefined();
      expect(block!.at - bucket!.at).toBeLessThan(900); // asked while the bucket's answer was still held back
    } finally {
      await worker.shutdown('test end');
      s3.destroy();
      await proxy.stop();
    }
  });

  it('a missing output bucket found after the download started: the job fails naming it and the download stops', async () => {
    const path = join(dir, 'big.npy');
    await generateDataset(path, { kind: 'normal', rows: 200_000, dims: 16, seed: 3 }); // 12.8 MB: 13 blocks of 1 MiB
    await stack.s3.put('data', 'big.npy', readFileSync(path));
    const blocks: number[] = [];
    const proxy = await startS3FaultProxy(stack.s3, {
      fault: (r) => {
        if (r.operation === 'BucketRequest') return delay(300);
        const range = String(r.headers.range ?? '');
        if (r.operation === 'GetObject' && !range.startsWith('bytes=0-')) {
          blocks.push(Date.now());
          return delay(100);
        }
        return undefined;
      },
    });
    const s3 = createS3(proxy.settings);
    const worker = await stack.startWorker({ KMFLEET_S3_READ_PART_MB: '1', KMFLEET_S3_READ_CONCURRENCY: '1' }, { s3 });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/big.npy' }, k: 2, backend: 'cpu', output: 's3://no-such-bucket/runs' }, { jobId: 'open-3' });
      const err = await stack.client.wait('open-3', { timeoutMs: 30_000, pollMs: 20 }).catch((e: Error) => e);
      expect(String(err)).toMatch(/no-such-bucket/);
      expect(blocks.length).toBeGreaterThan(0); // the download had started
      await new Promise((r) => setTimeout(r, 800));
      expect(blocks.length).toBeLessThan(7); // and stopped: 13 blocks at one GET a time would go on for 1.3 s
    } finally {
      await worker.shutdown('test end');
      s3.destroy();
      await proxy.stop();
    }
  });

  it('KMFLEET_MEMORY_CACHE_MB: a dataset within it is downloaded once; over it (no cache directory), k-means++ and the first pass share one download too', async () => {
    const bytes = 20_000 * 8 * 4;
    const runs: Record<string, number> = {};
    for (const [name, mb] of [['held', undefined], ['off', '0']] as const) {
      const worker = await stack.startWorker(mb === undefined ? {} : { KMFLEET_MEMORY_CACHE_MB: mb });
      try {
        const jobId = `open-memory-${name}`;
        await stack.client.enqueue({ dataset: { uri: 's3://data/blobs.npy' }, k: 5, maxIter: 3, seed: 1, backend: 'cpu', output: 's3://out/open' }, { jobId });
        const result = await stack.client.wait(jobId, { timeoutMs: 30_000, pollMs: 20 });
        runs[name] = result.timings.s3BytesRead;
      } finally {
        await worker.shutdown('test end');
      }
    }
    expect(runs.held).toBe(bytes);
    // 20,000 rows: k-means++'s sample is every row, read before the first pass; the host has room for the dataset twice,
    // so the job holds its download in memory until the engine holds every row (job-open.ts)
    expect(runs.off).toBe(bytes);
  });

  it('output bucket and dataset both missing: the bucket is named', async () => {
    const worker = await stack.startWorker();
    onTestFinished(() => worker.shutdown('test end'));
    await stack.client.enqueue({ dataset: { uri: 's3://data/none.npy' }, k: 2, backend: 'cpu', output: 's3://no-such-bucket/runs' }, { jobId: 'open-2' });
    const err = await stack.client.wait('open-2', { timeoutMs: 30_000, pollMs: 20 }).catch((e: Error) => e);
    expect(String(err)).toMatch(/no-such-bucket/);
    expect(String(err)).not.toMatch(/none\.npy/);
    expect((await stack.client.get('open-2'))?.attemptsMade).toBe(1);
  });
});
