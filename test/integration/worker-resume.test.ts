/**
 * Resume only from a checkpoint made for the same spec and the same dataset version: a job handed back (preemption)
 * whose dataset object was replaced meanwhile starts over on the new data instead of mixing the two.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCheckpointRecord } from '../../producer/job-state.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { headObject } from '../../worker/s3/objects.js';
import { bytesOf, referenceFit, startStack, until, type Stack } from './pipeline-fixture.js';

const ENGINE = { chunkRows: 8192, threads: 2 };
const ENV = { KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows), KMFLEET_THREADS: String(ENGINE.threads) };
const SPEC = { k: 32, maxIter: 10, tol: 0, seed: 4 };

describe('resume needs the same dataset version', () => {
  let stack: Stack;
  let dir: string;
  let a: string;
  let b: string;
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-resume-'));
    a = (await generateDataset(join(dir, 'a.npy'), { kind: 'normal', rows: 80_000, dims: 32, seed: 1 })).path;
    b = (await generateDataset(join(dir, 'b.npy'), { kind: 'normal', rows: 80_000, dims: 32, seed: 2 })).path;
    await stack.s3.put('data', 'd.npy', readFileSync(a));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a replaced dataset is not resumed from the old checkpoint', async () => {
    const first = await stack.startWorker(ENV);
    await stack.client.enqueue({ dataset: { uri: 's3://data/d.npy' }, ...SPEC, backend: 'cpu', output: 's3://out/runs' }, { jobId: 'r-1' });
    const redis = await stack.client.connection();
    await until(async () => ((await readCheckpointRecord(redis, stack.client.keys, 'r-1'))?.iteration ?? 0) >= 2, 30_000, 'checkpoint 2');
    await first.shutdown('test preemption');
    expect((await stack.client.get('r-1'))?.state).toBe('waiting');

    await stack.s3.put('data', 'd.npy', readFileSync(b));
    const next = await stack.startWorker(ENV);
    const result = await stack.client.wait('r-1', { timeoutMs: 60_000 });
    expect(result.resumedFrom).toBeUndefined();
    const ref = await referenceFit(b, SPEC, ENGINE);
    expect(bytesOf(decodeNpy(await stack.s3.get('out', 'runs/r-1/centroids.npy')).data).equals(bytesOf(ref.centroids))).toBe(true);
    expect(result.dataset.etag).toBe((await headObject(stack.s3.handle, { bucket: 'data', key: 'd.npy' })).etag);
    await next.shutdown();
  });
});
