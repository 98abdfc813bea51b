/**
 * A worker killed (SIGKILL) after its checkpoint's PUT reached S3 but before the Redis record named it leaves an object
 * that no record points at. Once the job completes on another worker, no checkpoint object of the job is left: the
 * cleanup finds them by prefix, not only the ones Redis names. Real worker processes, Redis and s3rver.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { startS3FaultProxy, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { ensureDistBuilt, spawnWorker, startStack, until, type ChildWorker, type Stack } from '../integration/pipeline-fixture.js';

const FAST_LOCKS = { KMFLEET_LOCK_DURATION_MS: '1500', KMFLEET_STALLED_INTERVAL_MS: '300' };

describe('checkpoint objects left by a killed worker', () => {
  let stack: Stack;
  let dir: string;
  let proxy: S3FaultProxy;
  let victim: ChildWorker | undefined;
  let orphan: string | undefined;

  beforeAll(async () => {
    ensureDistBuilt();
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-orphans-'));
    const path = (await generateDataset(join(dir, 'n.npy'), { kind: 'normal', rows: 60_000, dims: 16, seed: 12 })).path;
    await stack.s3.put('data', 'n.npy', readFileSync(path));
    // the victim's first checkpoint PUT is stored by s3rver; the victim dies before it hears back
    proxy = await startS3FaultProxy(stack.s3, {
      onResponse: (r, status) => {
        if (orphan || !victim || r.operation !== 'PutObject' || !r.key.includes('/_checkpoints/') || status !== 200) return;
        orphan = r.key;
        victim.kill('SIGKILL');
      },
    });
  });
  afterAll(async () => {
    victim?.kill('SIGKILL');
    await stack?.stop();
    await proxy?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('after the job completes elsewhere, no checkpoint object of it is left', async () => {
    victim = spawnWorker(stack.env({ KMFLEET_THREADS: '1', KMFLEET_CHUNK_ROWS: '8192', ...FAST_LOCKS, KMFLEET_S3_ENDPOINT: proxy.endpoint }));
    const jobId = 'orphan-1';
    await stack.client.enqueue({ dataset: { uri: 's3://data/n.npy' }, k: 16, maxIter: 10, tol: 0, seed: 2, backend: 'cpu', output: 's3://out/or' }, { jobId });
    expect((await victim.exited).signal).toBe('SIGKILL');
    expect(orphan).toMatch(/^or\/orphan-1\/_checkpoints\//);
    // killed before its record: the object is there, and Redis does not name it
    expect(stack.s3.keys('out', 'or/orphan-1/_checkpoints/')).toContain(orphan);
    const named = await (await stack.client.connection()).hmget(stack.client.keys.checkpoint(jobId), 'uri', 'prevUri');
    expect(named).not.toContain(`s3://out/${orphan}`);

    const next = await stack.startWorker({ KMFLEET_THREADS: '1', KMFLEET_CHUNK_ROWS: '8192', ...FAST_LOCKS });
    const result = await stack.client.wait(jobId, { timeoutMs: 60_000 });
    expect(result.iterations).toBe(10);
    await until(async () => stack.s3.keys('out', 'or/orphan-1/summary.json').length === 1, 10_000, 'summary.json');
    expect(stack.s3.keys('out', 'or/orphan-1/_checkpoints/')).toEqual([]);
    expect(stack.s3.keys('out', 'or/orphan-1/')).toEqual(['or/orphan-1/assignments.npy', 'or/orphan-1/centroids.npy', 'or/orphan-1/summary.json']);
    await next.shutdown();
  });
});
