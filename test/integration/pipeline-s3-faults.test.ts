/**
 * A job whose S3 answers 503 SlowDown, resets connections and cuts bodies short along the way still completes, with
 * the same bytes as on a healthy S3: every read, checkpoint and upload is retried (SDK retries before the answer, ours
 * for bodies cut mid-stream).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { createS3 } from '../../worker/s3/client.js';
import { reset, slowDown, startS3FaultProxy, truncate, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { bytesOf, referenceFit, startStack, type Stack } from './pipeline-fixture.js';

describe('pipeline through a faulty S3', () => {
  let stack: Stack;
  let proxy: S3FaultProxy;
  let dir: string;
  let path: string;

  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-s3faults-'));
    path = (await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: 60_000, dims: 16, centers: 10, seed: 2, clusterStd: 3 })).path;
    await stack.s3.put('data', 'blobs.npy', readFileSync(path));
    // every 3rd request fails in turn: 503 SlowDown, a reset before the answer, a body cut after 1000 bytes (bodies
    // that short, and answers without one, go through whole)
    proxy = await startS3FaultProxy(stack.s3, { fault: ({ n }) => (n % 3 === 0 ? [slowDown, reset, truncate][(n / 3) % 3]() : undefined) });
  });
  afterAll(async () => {
    await stack?.stop();
    await proxy?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('completes with the same outputs as on a healthy S3', async () => {
    const faulty = createS3({ ...proxy.settings, maxAttempts: 6, retry: { budgetMs: 10_000, attempts: 6, baseMs: 5, maxMs: 50 } });
    try {
      // small read parts: many GETs, so that every kind of fault hits reads too
      await stack.startWorker({ KMFLEET_CHUNK_ROWS: '4096', KMFLEET_THREADS: '2', KMFLEET_S3_READ_PART_MB: '1' }, { s3: faulty });
      const spec = { k: 10, maxIter: 15, seed: 5 };
      await stack.client.enqueue({ dataset: { uri: 's3://data/blobs.npy' }, ...spec, backend: 'cpu', output: 's3://out/faulty' }, { jobId: 'faulty-1' });
      const result = await stack.client.wait('faulty-1', { timeoutMs: 60_000 });
      expect((await stack.client.get('faulty-1'))?.attemptsMade).toBe(1);
      const ref = await referenceFit(path, spec, { chunkRows: 4096, threads: 2 });
      expect(bytesOf(decodeNpy(await stack.s3.get('out', 'faulty/faulty-1/centroids.npy')).data).equals(bytesOf(ref.centroids))).toBe(true);
      expect(bytesOf(decodeNpy(await stack.s3.get('out', 'faulty/faulty-1/assignments.npy')).data).equals(bytesOf(ref.labels))).toBe(true);
      expect(result.iterations).toBe(ref.iterations);
      const kinds = new Set(proxy.requests.map((r) => r.fault).filter(Boolean));
      expect(kinds).toEqual(new Set(['SlowDown', 'reset', 'truncate']));
      expect(proxy.requests.filter((r) => r.fault).length).toBeGreaterThanOrEqual(4);
    } finally {
      faulty.destroy();
    }
  });
});
