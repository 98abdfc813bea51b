/**
 * The engine's tiers through a worker job (CPU backend: its resident rows play the device's part), on real Redis and
 * s3rver: a dataset larger than the rows kept resident and than the memory cache, without a cache directory. With the
 * host tier the rows are read from S3 once per attempt; without it, every pass reads the rows it does not hold again.
 * Either way the outputs are those of the driver on the same file, bit for bit, and summary.json says where the rows
 * of each pass came from.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { bytesOf, referenceFit, startStack, type Stack } from './pipeline-fixture.js';

const ROWS = 100_000, DIMS = 16, ROW_BYTES = DIMS * 4, CHUNK = 4096;
const ENGINE = { chunkRows: CHUNK, threads: 2 };
// about 5,000 rows resident (an fp32 row and its fp64 norm each), no memory cache: the rest is the tiers' business
const BASE_ENV = {
  KMFLEET_CHUNK_ROWS: String(CHUNK), KMFLEET_THREADS: '2', KMFLEET_MEMORY_CACHE_MB: '0',
  KMFLEET_GPU_MEMORY: String(5000 * (DIMS * 4 + 8)),
};

describe('worker: rows past the resident ones', () => {
  let stack: Stack;
  let dir: string;
  let data: string;
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-tiers-'));
    data = (await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: ROWS, dims: DIMS, centers: 10, seed: 3, clusterStd: 4 })).path;
    await stack.s3.put('data', 'tiers.npy', readFileSync(data));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const spec = { k: 10, maxIter: 12, tol: 0, seed: 2, init: 'random' as const };

  async function job(id: string, env: Record<string, string>, s: { init: 'random' | 'kmeans++' } = spec) {
    const worker = await stack.startWorker({ ...BASE_ENV, ...env });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/tiers.npy' }, ...spec, ...s, backend: 'cpu', output: 's3://out/tiers' }, { jobId: id });
      const result = await stack.client.wait(id, { timeoutMs: 60_000 });
      const summary = JSON.parse((await stack.s3.get('out', `tiers/${id}/summary.json`)).toString('utf8'));
      const centroids = decodeNpy(await stack.s3.get('out', `tiers/${id}/centroids.npy`));
      const labels = decodeNpy(await stack.s3.get('out', `tiers/${id}/assignments.npy`));
      const progress = (await stack.client.get(id))?.progress;
      return { result, summary, centroids, labels, progress };
    } finally {
      await worker.shutdown();
    }
  }

  it('reads S3 once with a host tier, every pass without one, and gives the same bits', async () => {
    const ref = await referenceFit(data, spec, ENGINE);
    const host = await job('tiers-host', { KMFLEET_HOST_MEMORY: String(ROWS * ROW_BYTES) });
    const none = await job('tiers-none', { KMFLEET_HOST_MEMORY: '0' });
    for (const run of [host, none]) {
      expect(bytesOf(run.centroids.data).equals(bytesOf(ref.centroids))).toBe(true);
      expect(bytesOf(run.labels.data).equals(bytesOf(ref.labels))).toBe(true);
      expect(run.result.iterations).toBe(ref.iterations);
    }
    const passes = host.result.iterations + 1;
    expect(passes).toBeGreaterThan(5);

    // the host tier: every row once, whatever the number of passes
    const resident = host.summary.tiers.laterPasses.rows.resident;
    expect(resident).toBeGreaterThan(4000);
    expect(resident).toBeLessThan(6000);
    expect(host.summary.tiers).toMatchObject({
      fedFrom: 's3',
      firstPass: { rows: { resident: 0, host: 0, fed: ROWS } },
      laterPasses: { rows: { resident, host: ROWS - resident, fed: 0 }, bytes: { fed: 0 } },
    });
    // (the random init's rows come with the spans around them: a few more bytes, the same in both jobs)
    expect(host.progress?.rowsPerPass).toEqual({ resident, host: ROWS - resident, fed: 0, fedFrom: 's3' });
    expect(host.result.timings.s3BytesRead).toBeGreaterThanOrEqual(ROWS * ROW_BYTES);
    expect(host.result.timings.s3BytesRead).toBeLessThanOrEqual(1.02 * ROWS * ROW_BYTES);

    // no host tier: each later pass reads the rows past the resident ones from S3 again
    expect(none.summary.tiers.laterPasses.rows).toEqual({ resident, host: 0, fed: ROWS - resident });
    expect(none.result.timings.s3BytesRead).toBe(host.result.timings.s3BytesRead + (passes - 1) * (ROWS - resident) * ROW_BYTES);
  });

  it("k-means++: its sample and the first pass share one download (given back once the engine holds every row)", async () => {
    const pp = { ...spec, init: 'kmeans++' as const };
    const ref = await referenceFit(data, pp, ENGINE);
    const run = await job('tiers-kmeanspp', { KMFLEET_HOST_MEMORY: String(ROWS * ROW_BYTES) }, pp);
    expect(bytesOf(run.centroids.data).equals(bytesOf(ref.centroids))).toBe(true);
    expect(bytesOf(run.labels.data).equals(bytesOf(ref.labels))).toBe(true);
    expect(run.result.timings.s3BytesRead).toBeGreaterThanOrEqual(ROWS * ROW_BYTES);
    expect(run.result.timings.s3BytesRead).toBeLessThanOrEqual(1.02 * ROWS * ROW_BYTES);
    expect(run.summary.tiers.laterPasses.rows.fed).toBe(0);
  });
});
