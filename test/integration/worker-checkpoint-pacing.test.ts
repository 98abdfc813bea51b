/**
 * KMFLEET_CHECKPOINT_MIN_INTERVAL_MS: a worker writes checkpoints no closer together than the interval, whatever the
 * spec's checkpointEvery, and the result does not depend on how many were written. A fast job under a long interval
 * writes none; with interval 0 it writes one per iteration.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCheckpointRecord } from '../../producer/job-state.js';
import { loadWorkerConfig } from '../../worker/config.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { bytesOf, referenceFit, startStack, type Stack } from './pipeline-fixture.js';

const ENGINE = { chunkRows: 8192, threads: 2 };
const SPEC = { k: 16, maxIter: 6, tol: 0, seed: 9 };

describe('checkpoint pacing', () => {
  let stack: Stack;
  let dir: string;
  let path: string;
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-pacing-'));
    path = (await generateDataset(join(dir, 'p.npy'), { kind: 'normal', rows: 40_000, dims: 16, seed: 3 })).path;
    await stack.s3.put('data', 'p.npy', readFileSync(path));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('defaults to one second, and rejects a negative interval', () => {
    expect(loadWorkerConfig({}).checkpointMinIntervalMs).toBe(1000);
    expect(loadWorkerConfig({ KMFLEET_CHECKPOINT_MIN_INTERVAL_MS: '0' }).checkpointMinIntervalMs).toBe(0);
    expect(() => loadWorkerConfig({ KMFLEET_CHECKPOINT_MIN_INTERVAL_MS: '-5' })).toThrow(/KMFLEET_CHECKPOINT_MIN_INTERVAL_MS/);
  });

  it('a long interval writes no checkpoint in a fast job, interval 0 one per iteration; same centroids', async () => {
    const redis = await stack.client.connection();
    const run = async (jobId: string, interval: string) => {
      const w = await stack.startWorker({
        KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows),
        KMFLEET_CHECKPOINT_MIN_INTERVAL_MS: interval,
        KMFLEET_KEEP_CHECKPOINTS: 'true',
      });
      try {
        await stack.client.enqueue({ dataset: { uri: 's3://data/p.npy' }, ...SPEC, checkpointEvery: 1, backend: 'cpu', output: 's3://out/pace' }, { jobId });
        return await stack.client.wait(jobId, { timeoutMs: 60_000 });
      } finally {
        await w.shutdown();
      }
    };
    const paced = await run('pace-long', '600000');
    expect(paced.iterations).toBe(SPEC.maxIter);
    expect(paced.timings.checkpoints).toBe(0);
    expect(await readCheckpointRecord(redis, stack.client.keys, 'pace-long')).toBeNull();

    const every = await run('pace-zero', '0');
    expect(every.timings.checkpoints).toBe(SPEC.maxIter);
    expect((await readCheckpointRecord(redis, stack.client.keys, 'pace-zero'))?.iteration).toBe(SPEC.maxIter);

    const ref = await referenceFit(path, SPEC, ENGINE);
    for (const id of ['pace-long', 'pace-zero']) {
      expect(bytesOf(decodeNpy(await stack.s3.get('out', `pace/${id}/centroids.npy`)).data).equals(bytesOf(ref.centroids))).toBe(true);
    }
  });
});
