// Engine.open's settings for tests and measurements (native/index.ts EngineOptions.update, CudaOptions): a bad value is
// an InvalidArgumentError naming the field, a good one opens (the CPU backend ignores the CUDA settings), and a CPU
// engine asked to update on the host gives the same bits as one left to choose (its update is on the host anyway).
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, InvalidArgumentError, type EngineOptions, type PassResult } from '../../native/index.js';
import { bytesOf, normalData, pickRows, runPass } from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

const base = { rows: 2000, dims: 8, k: 5, metric: 'l2', dtype: 'f32', backend: 'cpu', threads: 2 } as const;

async function open(o: Partial<EngineOptions> = {}): Promise<Engine> {
  const e = await Engine.open({ ...base, ...o });
  engines.push(e);
  return e;
}

describe('Engine.open: update and cuda settings', () => {
  it.each([
    [{ update: 'device' }, /update must be one of 'auto', 'host', got 'device'/],
    [{ cuda: 'fast' }, /cuda must be an object/],
    [{ cuda: { assignKernel: 'mma' } }, /cuda\.assignKernel must be one of 'auto', 'portable', got 'mma'/],
    [{ cuda: { exactScreen: 'only' } }, /cuda\.exactScreen must be one of 'auto', 'off', got 'only'/],
    [{ cuda: { relativeKeys: 1 } }, /cuda\.relativeKeys must be a string/],
    [{ cuda: { slots: 1 } }, /cuda\.slots must be 2\.\.16, got 1/],
    [{ cuda: { slots: 17 } }, /cuda\.slots must be 2\.\.16, got 17/],
    [{ cuda: { residentAhead: 0 } }, /cuda\.residentAhead must be 1\.\.1024, got 0/],
    [{ cuda: { sharedMemoryLimit: -1 } }, /cuda\.sharedMemoryLimit must be >= 0 bytes, got -1/],
    [{ cuda: { sharedMemoryLimit: 1.5 } }, /cuda\.sharedMemoryLimit must be an integer/],
  ])('refuses %j', async (o, message) => {
    const err = await open(o as Partial<EngineOptions>).then(() => null, (e: unknown) => e as Error);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err!.message).toMatch(message);
  });

  it('opens with every setting given, and a host update gives the bits of the default', async () => {
    const x = normalData(base.rows, base.dims, 7);
    const init = pickRows(x, base.dims, [0, 10, 20, 30, 40]);
    const cuda = { assignKernel: 'portable', sharedMemoryLimit: 101376, exactScreen: 'off', relativeKeys: 'always',
      slots: 4, residentAhead: 3 } as const;
    const a = await open({ update: 'host', cuda });
    const b = await open();
    for (const e of [a, b]) e.setCentroids(init);
    for (let p = 0; p < 3; p++) {
      const ra = await runPass<PassResult>(a, bytesOf(x), base.rows, 'fit');
      const rb = await runPass<PassResult>(b, bytesOf(x), base.rows, 'fit');
      expect(ra.update).toBe('host');
      expect(Object.is(ra.inertia, rb.inertia)).toBe(true);
      expect(Buffer.from(a.centroids().buffer).equals(Buffer.from(b.centroids().buffer))).toBe(true);
    }
  });
});
