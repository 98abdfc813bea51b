// engine.readCentroids() (native/index.ts): a read queued on the engine thread behind the work before it, so that
// between beginPass and finishPass it gives the centroids the pass started from — the job's driver reads each
// iteration's centroids this way while the next pass computes — and beginPass's `firstRow`, which lets the engine
// start on its resident rows at once. CPU backend here; test/gpu/cuda-device-update.test.ts covers the device update.
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, InvalidArgumentError, type PassResult } from '../../native/index.js';
import { blobData, bytesOf, pickRows, runPass } from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

async function open(rows: number, dims: number, k: number, extra: { memoryBudget?: number } = {}): Promise<Engine> {
  const e = await Engine.open({ rows, dims, k, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 1000, ...extra });
  engines.push(e);
  return e;
}

const bits = (a: Float32Array) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));

describe('readCentroids', () => {
  const n = 5_003, d = 7, k = 9;
  const x = blobData(n, d, k, 31, 5, 1.2);
  const init = pickRows(x, d, [0, 500, 1000, 1500, 2000, 2500, 3000, 3500, 4000]);

  it('between beginPass and finishPass gives the centroids the pass started from; after it, the updated ones', async () => {
    const e = await open(n, d, k);
    await expect(e.readCentroids()).rejects.toThrow(InvalidArgumentError);
    e.setCentroids(init);
    expect(bits(await e.readCentroids())).toEqual(bits(init));
    let read: Promise<Float32Array> | undefined;
    const pass = runPass<PassResult>(e, bytesOf(x), n, 'fit', { onBegin: () => { read = e.readCentroids(); } });
    const during = await read!;
    await pass;
    expect(bits(during)).toEqual(bits(init));
    const after = e.centroids();
    expect(bits(after)).not.toEqual(bits(init));
    expect(bits(await e.readCentroids())).toEqual(bits(after));
  });

  it('is refused while a finishPass is pending, when it would land after the pass\'s update', async () => {
    const e = await open(n, d, k);
    e.setCentroids(init);
    e.beginPass('fit');
    for (let first = 0; first < n; first += 1000) {
      const count = Math.min(1000, n - first);
      e.buffer(0).set(bytesOf(x).subarray(first * d * 4, (first + count) * d * 4));
      await e.feed(0, first, count);
    }
    const finishing = e.finishPass();
    await expect(e.readCentroids()).rejects.toThrow(/readCentroids while finishPass is pending/);
    await finishing;
    expect(bits(await e.readCentroids())).toEqual(bits(e.centroids()));
  });

  it('settles when the engine closes with the read still queued', async () => {
    const e = await open(n, d, k);
    e.setCentroids(init);
    const reads = [e.readCentroids(), e.readCentroids()];
    e.close();
    for (const r of await Promise.allSettled(reads)) {
      if (r.status === 'fulfilled') expect(bits(r.value)).toEqual(bits(init));
      else expect(r.reason).toBeInstanceOf(Error);
    }
    await expect(e.readCentroids()).rejects.toThrow(/the engine is closed/);
  });
});

describe('beginPass firstRow', () => {
  const n = 6_007, d = 5, k = 8;
  const x = bytesOf(blobData(n, d, k, 41, 5, 1.5));
  const init = pickRows(blobData(n, d, k, 41, 5, 1.5), d, [1, 800, 1600, 2400, 3200, 4000, 4800, 5600]);
  const budget = 3_000 * (d * 4 + 8) + 3 * 1000 * d * 4;  // some rows resident, the rest streamed

  it('names a bad value', async () => {
    const e = await open(n, d, k);
    e.setCentroids(init);
    for (const bad of [-1, 1.5, n + 1, Number.NaN, '3' as unknown as number]) {
      expect(() => e.beginPass('fit', { firstRow: bad }), String(bad)).toThrow(/beginPass firstRow must be an integer in \[0, 6007\]/);
    }
  });

  it('gives the same passes told or not, and at row 0 streams every row', async () => {
    const runs: Float32Array[] = [];
    const results: PassResult[][] = [];
    for (const mode of ['untold', 'told', 'zero'] as const) {
      const e = await open(n, d, k, { memoryBudget: budget });
      const resident = e.plan.residentRows;
      expect(resident).toBeGreaterThan(0);
      expect(resident).toBeLessThan(n);
      e.setCentroids(init);
      const rs: PassResult[] = [];
      for (let p = 0; p < 4; p++) {
        const skipBelow = p === 0 || mode === 'zero' ? 0 : rs.at(-1)!.heldRows;
        rs.push(await runPass<PassResult>(e, x, n, 'fit', { skipBelow, sayFirstRow: mode !== 'untold' }));
      }
      runs.push(e.centroids());
      results.push(rs);
    }
    expect(bits(runs[1])).toEqual(bits(runs[0]));
    expect(bits(runs[2])).toEqual(bits(runs[0]));
    const strip = (rs: PassResult[]) => rs.map(({ ms: _ms, rowsFrom: _from, rowsSettled: _settled, counts, ...r }) => ({ ...r, counts: Array.from(counts) }));
    expect(strip(results[1])).toEqual(strip(results[0]));
    expect(strip(results[2])).toEqual(strip(results[0]));
  });
});
