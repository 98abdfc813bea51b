/**
 * Poison jobs: datasets that can never succeed (a NaN row, an Inf row) on real Redis + s3rver + engine, with 3
 * attempts allowed. Each fails ONCE (UnrecoverableError: no retry, attemptsMade 1) with a reason that names the bad
 * row, writes no outputs, and the jobs queued behind them on the same single-slot worker keep completing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { startStack, type Stack } from '../integration/pipeline-fixture.js';

function dataset(rows: number, dims: number, seed: number, poison?: { row: number; value: number }): Buffer {
  const a = new Float32Array(rows * dims);
  let s = seed >>> 0;
  for (let i = 0; i < a.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = (s / 2 ** 32) * 10 + (i % dims);
  }
  if (poison) a[poison.row * dims + 1] = poison.value;
  return encodeNpy(a, [rows, dims]);
}

describe('poison jobs do not block the queue', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack(); // client job options: attempts 3, fixed backoff 200 ms
    await stack.s3.put('data', 'good.npy', dataset(5000, 8, 1));
    await stack.s3.put('data', 'nan.npy', dataset(5000, 8, 2, { row: 4321, value: NaN }));
    await stack.s3.put('data', 'inf.npy', dataset(5000, 8, 3, { row: 17, value: -Infinity }));
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('NaN and Inf datasets fail once, naming the row; the good jobs queued behind them complete', async () => {
    const spec = (uri: string) => ({ dataset: { uri }, k: 5, maxIter: 10, backend: 'cpu' as const, output: 's3://out/poison' });
    // queued before any worker runs, poison first: the single-slot worker must take them in order
    await stack.client.enqueue(spec('s3://data/nan.npy'), { jobId: 'nan-1' });
    await stack.client.enqueue(spec('s3://data/good.npy'), { jobId: 'good-1' });
    await stack.client.enqueue(spec('s3://data/inf.npy'), { jobId: 'inf-1' });
    await stack.client.enqueue(spec('s3://data/good.npy'), { jobId: 'good-2' });
    await stack.client.enqueue(spec('s3://data/nan.npy'), { jobId: 'nan-2' });
    await stack.client.enqueue(spec('s3://data/good.npy'), { jobId: 'good-3' });
    const worker = await stack.startWorker({ KMFLEET_CONCURRENCY: '1', KMFLEET_THREADS: '1' });
    try {
      for (const id of ['good-1', 'good-2', 'good-3']) {
        const r = await stack.client.wait(id, { timeoutMs: 30_000 });
        expect(r.iterations).toBeGreaterThan(0);
        expect(stack.s3.keys('out', `poison/${id}/`)).toContain(`poison/${id}/summary.json`);
      }
      for (const [id, row] of [['nan-1', 4321], ['inf-1', 17], ['nan-2', 4321]] as const) {
        await expect(stack.client.wait(id, { timeoutMs: 30_000 })).rejects.toThrow();
        const info = await stack.client.get(id);
        expect(info?.state).toBe('failed');
        expect(info?.attemptsMade, `${id} must not be retried`).toBe(1);
        expect(info?.failedReason).toMatch(/non-finite|NaN|Inf/i);
        expect(info?.failedReason).toContain(String(row));
        expect(stack.s3.keys('out', `poison/${id}/`)).toEqual([]);
      }
      // and the queue is empty afterwards: nothing waiting for a retry
      const counts = await (await stack.client.connection()).keys('*:jobs:delayed');
      expect(counts.length === 0 || (await (await stack.client.connection()).zcard(counts[0])) === 0).toBe(true);
    } finally {
      await worker.shutdown('test end');
    }
  });
});
