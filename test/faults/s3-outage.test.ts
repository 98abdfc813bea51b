/**
 * An S3 outage of several seconds (every request refused: the connection dies) during a checkpoint and during the
 * final upload, with a worker on the default S3 settings (the retry budget of KMFLEET_S3_RETRY_BUDGET_MS): the job
 * waits the outage out and completes in its one and only BullMQ attempt.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { createS3, type S3Handle } from '../../worker/s3/client.js';
import { reset, startS3FaultProxy, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { startStack, type Stack } from '../integration/pipeline-fixture.js';

const OUTAGE_MS = 6_000;

describe('an S3 outage of a few seconds', () => {
  let stack: Stack;
  let dir: string;
  let proxy: S3FaultProxy;
  let s3: S3Handle;
  /** the outage starts at the first request matching this, and lasts OUTAGE_MS */
  let trigger: ((key: string, op: string) => boolean) | undefined;
  let outage: { from: number; refused: number } | undefined;

  beforeAll(async () => {
    stack = await startStack({ clientJobOptions: { attempts: 1 } });
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-s3-outage-'));
    const path = (await generateDataset(join(dir, 'n.npy'), { kind: 'normal', rows: 40_000, dims: 16, seed: 6 })).path;
    await stack.s3.put('data', 'n.npy', readFileSync(path));
    proxy = await startS3FaultProxy(stack.s3, {
      fault: (r) => {
        if (!outage && trigger?.(r.key, r.operation)) outage = { from: Date.now(), refused: 0 };
        if (outage && Date.now() - outage.from < OUTAGE_MS) {
          outage.refused++;
          return reset();
        }
        return undefined;
      },
    });
    // the worker's S3 client as a pod gets it: the default retries and budget, only the endpoint points at the proxy
    s3 = createS3({ ...proxy.settings, retry: undefined, maxAttempts: undefined });
    await stack.startWorker({ KMFLEET_THREADS: '1' }, { s3 });
  });
  afterAll(async () => {
    await stack?.stop();
    s3?.destroy();
    await proxy?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const runThrough = async (jobId: string, at: (key: string, op: string) => boolean) => {
    outage = undefined;
    trigger = at;
    await stack.client.enqueue({ dataset: { uri: 's3://data/n.npy' }, k: 8, maxIter: 6, tol: 0, seed: 3, backend: 'cpu', output: 's3://out/o' }, { jobId });
    const result = await stack.client.wait(jobId, { timeoutMs: 60_000 });
    expect(outage).toBeDefined();
    expect(outage!.refused).toBeGreaterThan(1);
    expect(Date.now() - outage!.from).toBeGreaterThanOrEqual(OUTAGE_MS);
    expect(result.iterations).toBe(6);
    expect((await stack.client.get(jobId))?.attemptsMade).toBe(1);
    const summary = JSON.parse((await stack.s3.get('out', `o/${jobId}/summary.json`)).toString('utf8'));
    for (const name of ['centroids.npy', 'assignments.npy']) {
      const bytes = await stack.s3.get('out', `o/${jobId}/${name}`);
      expect(summary.checksums[name]).toBe(`sha256:${createHash('sha256').update(bytes).digest('hex')}`);
    }
  };

  it('during a checkpoint: the job completes in its one attempt', async () => {
    await runThrough('outage-ckpt', (key, op) => op === 'PutObject' && key.includes('/_checkpoints/'));
  });

  it('during the final upload: the job completes in its one attempt', async () => {
    await runThrough('outage-final', (key, op) => op === 'PutObject' && key.endsWith('/assignments.npy'));
  });
});
