// The worker re-checks KMFLEET_ALLOWED_BUCKETS when it takes a job: a producer with other (or no) settings cannot make
// a worker read or write a bucket outside the fleet's list. The job fails once, naming the bucket; nothing is written.
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { startStack, type Stack } from './pipeline-fixture.js';

describe('worker: allowed buckets', () => {
  let stack: Stack;
  let dir: string;
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-buckets-'));
    const { path } = await generateDataset(join(dir, 'd.npy'), { kind: 'blobs', rows: 5_000, dims: 4, centers: 3, seed: 1 });
    await stack.s3.put('data', 'd.npy', readFileSync(path));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('fails a job whose output bucket is not on the list, without retries or outputs; allowed jobs still run', async () => {
    const worker = await stack.startWorker({ KMFLEET_ALLOWED_BUCKETS: 'data', KMFLEET_THREADS: '1' });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/d.npy' }, k: 3, maxIter: 5, backend: 'cpu', output: 's3://out/runs' }, { jobId: 'not-allowed' });
      await expect(stack.client.wait('not-allowed', { timeoutMs: 30_000 })).rejects.toThrow(/bucket 'out' is not allowed/);
      const info = await stack.client.get('not-allowed');
      expect(info?.attemptsMade).toBe(1);
      expect(stack.s3.keys('out')).toEqual([]);

      await stack.client.enqueue({ dataset: { uri: 's3://data/d.npy' }, k: 3, maxIter: 5, backend: 'cpu', output: 's3://data/runs' }, { jobId: 'allowed' });
      const result = await stack.client.wait('allowed', { timeoutMs: 30_000 });
      expect(result.iterations).toBeGreaterThan(0);
      expect(stack.s3.keys('data')).toContain('runs/allowed/summary.json');
    } finally {
      await worker.shutdown('test end');
    }
  });
});
