/**
 * A cancel that arrives while the job writes its outputs, on both sides of the commit point, with a real worker, Redis
 * and s3rver (behind a proxy that holds one chosen upload):
 *   - before it (the assignments upload in flight): the cancel is signalled and wins — the upload is aborted, the
 *     job fails as cancelled, nothing is left under its prefix, no result is recorded;
 *   - after it (summary.json on its way): the cancel answers 'committed' and changes nothing — the job completes,
 *     its result is recorded, no cancel flag is left behind.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { createS3, type S3Handle } from '../../worker/s3/client.js';
import { hold, startS3FaultProxy, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { startStack, until, type Stack } from '../integration/pipeline-fixture.js';

describe('a cancel during the final upload', () => {
  let stack: Stack;
  let dir: string;
  let proxy: S3FaultProxy;
  let s3: S3Handle;
  /** the next request whose key ends with this name is held until `release` */
  let holdName: string | undefined;
  let heldSeen = false;
  let release: () => void = () => {};

  beforeAll(async () => {
    stack = await startStack({ clientJobOptions: { attempts: 1 } });
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-late-cancel-'));
    const path = (await generateDataset(join(dir, 'n.npy'), { kind: 'normal', rows: 50_000, dims: 16, seed: 2 })).path;
    await stack.s3.put('data', 'n.npy', readFileSync(path));
    proxy = await startS3FaultProxy(stack.s3, {
      fault: (r) => {
        if (!holdName || heldSeen || r.operation !== 'PutObject' || !r.key.endsWith(`/${holdName}`)) return undefined;
        heldSeen = true;
        return hold(new Promise<void>((resolve) => (release = resolve)));
      },
    });
    s3 = createS3(proxy.settings);
    await stack.startWorker({ KMFLEET_THREADS: '1' }, { s3 });
  });
  afterAll(async () => {
    release();
    await stack?.stop();
    s3?.destroy();
    await proxy?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const run = async (jobId: string, held: string) => {
    holdName = held;
    heldSeen = false;
    await stack.client.enqueue(
      { dataset: { uri: 's3://data/n.npy' }, k: 8, maxIter: 5, tol: 0, seed: 1, backend: 'cpu', output: 's3://out/lc', name: `model-${jobId}` },
      { jobId },
    );
    await until(async () => heldSeen, 30_000, `the ${held} upload`);
  };

  it('before the commit point: the cancel wins, the upload is aborted, nothing is left, no result', async () => {
    await run('lc-before', 'assignments.npy');
    const res = await stack.client.cancel('lc-before');
    expect(res).toMatchObject({ outcome: 'signalled', state: 'active' });
    await expect(stack.client.wait('lc-before', { timeoutMs: 30_000 })).rejects.toThrow(/cancelled/);
    release();
    const info = await stack.client.get('lc-before');
    expect(info).toMatchObject({ state: 'failed', failedReason: 'cancelled' });
    expect(await stack.client.history('model-lc-before')).toEqual([]);
    // the held PUT's client gave up: the proxy dropped it rather than let it land after the discard
    await until(async () => proxy.requests.some((r) => r.fault === 'hold, dropped'), 10_000, 'the held request to be dropped');
    expect(stack.s3.keys('out', 'lc/lc-before/')).toEqual([]);
  });

  it('after the commit point: the cancel answers committed, the job completes with its result', async () => {
    await run('lc-after', 'summary.json');
    const res = await stack.client.cancel('lc-after');
    expect(res).toMatchObject({ outcome: 'committed', state: 'active' });
    release();
    const result = await stack.client.wait('lc-after', { timeoutMs: 30_000 });
    expect(result.iterations).toBe(5);
    const info = await stack.client.get('lc-after');
    expect(info?.state).toBe('completed');
    expect(info?.cancelRequested ?? null).toBeNull();
    expect((await stack.client.history('model-lc-after')).map((r) => r.jobId)).toEqual(['lc-after']);
    expect(stack.s3.keys('out', 'lc/lc-after/').filter((k) => !k.includes('/_checkpoints/'))).toEqual([
      'lc/lc-after/assignments.npy',
      'lc/lc-after/centroids.npy',
      'lc/lc-after/summary.json',
    ]);
  });
});
