// Rows loaded ahead of the first pass (native/index.ts loadRows): the engine keeps them as resident rows without a pass,
// and a run whose first pass starts after them is bit for bit the run whose first pass fed every row — centroids,
// labels, and every number of every pass (iteration 1's `reassigned` included). Also: loads in any order, partial
// loads, cancel, close, a resident budget smaller than the dataset, and bad rows reported as without a load.
import { afterAll, describe, expect, it } from 'vitest';

import {
  CancelledError, Engine, InvalidArgumentError, NonFiniteInputError, type EngineOptions, type PassResult,
} from '../../native/index.js';
import { blobData, bytesOf, normalData, pickRows, runPass, toF16 } from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

async function open(o: Partial<EngineOptions> & Pick<EngineOptions, 'rows' | 'dims' | 'k'>): Promise<Engine> {
  const e = await Engine.open({ metric: 'l2', dtype: 'f32', backend: 'cpu', ...o });
  engines.push(e);
  return e;
}

interface Run {
  centroids: Float32Array;
  labels: Int32Array;
  results: PassResult[];
}

/** `passes` fit passes then one assign pass; the first pass starts at `firstStart`, later ones where the held rows end. */
async function lloyd(e: Engine, bytes: Uint8Array, n: number, init: Float32Array, passes: number, firstStart = 0): Promise<Run> {
  e.setCentroids(init);
  const results: PassResult[] = [];
  for (let p = 0; p < passes; p++) {
    results.push(await runPass<PassResult>(e, bytes, n, 'fit', { skipBelow: p === 0 ? firstStart : results.at(-1)!.heldRows }));
  }
  results.push(await runPass<PassResult>(e, bytes, n, 'assign', { skipBelow: results.at(-1)!.heldRows }));
  return { centroids: e.centroids(), labels: e.labels(), results };
}

function expectSame(a: Run, b: Run, what: string): void {
  expect(Buffer.compare(Buffer.from(a.centroids.buffer), Buffer.from(b.centroids.buffer)), `${what}: centroids differ`).toBe(0);
  expect(Buffer.compare(Buffer.from(a.labels.buffer), Buffer.from(b.labels.buffer)), `${what}: labels differ`).toBe(0);
  expect(a.results.length).toBe(b.results.length);
  a.results.forEach((r, i) => {
    // where the rows came from differs (loaded rows are held on the first pass): the results must not
    const { ms: _a, rowsFrom: _fa, rowsSettled: _sa, ...ra } = r;
    const { ms: _b, rowsFrom: _fb, rowsSettled: _sb, ...rb } = b.results[i];
    expect({ ...ra, counts: Array.from(ra.counts) }, `${what}: pass ${i}`).toEqual({ ...rb, counts: Array.from(rb.counts) });
    expect(Object.is(r.inertia, b.results[i].inertia) && Object.is(r.shift, b.results[i].shift), `${what}: pass ${i} bits`).toBe(true);
  });
}

/** Loads [first, end) of `bytes` in the given order of [from, to) ranges; returns the last resolved value. */
async function load(e: Engine, bytes: Uint8Array, ranges: [number, number][]): Promise<number> {
  const rb = e.plan.rowBytes;
  const loads = ranges.map(([a, b]) => e.loadRows(bytes.subarray(a * rb, b * rb), a, b - a));
  const held = await Promise.all(loads);
  return held[held.length - 1];
}

describe('loadRows', () => {
  it('is offered by the CPU backend', async () => {
    const e = await open({ rows: 100, dims: 4, k: 2 });
    expect(e.loadsRows).toBe(true);
  });

  const cases: { name: string; metric: 'l2' | 'cosine'; dtype: 'f32' | 'f16' }[] = [
    { name: 'f32 l2', metric: 'l2', dtype: 'f32' },
    { name: 'f16 l2', metric: 'l2', dtype: 'f16' },
    { name: 'f32 cosine', metric: 'cosine', dtype: 'f32' },
  ];
  // threads 8: a load converts on 4 of them (half the pool), each a share of its rows; threads 2: on one
  for (const c of cases) for (const threads of [2, 8]) {
    it(`${c.name}, ${threads} threads: loaded out of order, overlapping, then fit == plain fit, bitwise`, async () => {
      const n = 30_011, d = 19, k = 37;
      const x = blobData(n, d, 40, 3);
      const bytes = c.dtype === 'f16' ? bytesOf(toF16(x)) : bytesOf(x);
      const init = pickRows(x, d, Array.from({ length: k }, (_, i) => i * 101));
      const o = { rows: n, dims: d, k, metric: c.metric, dtype: c.dtype, chunkRows: 4096, threads } as const;
      const plain = await lloyd(await open(o), bytes, n, init, 4);
      const e = await open(o);
      expect(e.plan.residentRows).toBe(n);
      // blocks as a download delivers them: later blocks first, one block in two pieces, one range loaded twice
      const held = await load(e, bytes, [[20_000, 30_011], [7_000, 13_333], [13_333, 20_000], [0, 3_001], [2_000, 7_000], [5_000, 9_000]]);
      expect(held).toBe(n);
      expectSame(await lloyd(e, bytes, n, init, 4, held), plain, c.name);
      expect(plain.results[0].reassigned, 'iteration 1 counts every row as reassigned').toBe(n);
    });
  }

  it('a partial load (prefix not on a chunk boundary): the first pass streams from there, same bits', async () => {
    const n = 20_000, d = 8, k = 16;
    const x = normalData(n, d, 5);
    const bytes = bytesOf(x);
    const init = pickRows(x, d, Array.from({ length: k }, (_, i) => i * 7));
    const o = { rows: n, dims: d, k, chunkRows: 3000 };
    const plain = await lloyd(await open(o), bytes, n, init, 3);
    const e = await open(o);
    // rows [0, 5123) and [9000, 12000): held from row 0 is 5123; the pass retains the rest as it streams
    expect(await load(e, bytes, [[9000, 12000], [0, 5123]])).toBe(5123);
    expectSame(await lloyd(e, bytes, n, init, 3, 5123), plain, 'partial');
    // a pass may still start at row 0 after a load (the engine then ignores its resident copy for that pass)
    const e2 = await open(o);
    await load(e2, bytes, [[0, 5123]]);
    expectSame(await lloyd(e2, bytes, n, init, 3, 0), plain, 'partial, fed from row 0');
    // a feed anywhere else is out of sequence, and names what is resident
    const e3 = await open(o);
    await load(e3, bytes, [[0, 5123]]);
    e3.setCentroids(init);
    e3.beginPass('fit');
    e3.buffer(0).set(bytes.subarray(6000 * 32, 9000 * 32));
    await expect(e3.feed(0, 6000, 3000)).rejects.toThrow(/feed out of sequence: expected firstRow 5123, got 6000 \(the engine holds rows \[0, 5123\)\)/);
    await e3.finishPass().catch(() => {});
  });

  it('rows beyond the resident budget are not kept; the first pass streams them as today', async () => {
    const n = 12_000, d = 16, k = 20;
    const x = normalData(n, d, 7);
    const bytes = bytesOf(x);
    const init = pickRows(x, d, Array.from({ length: k }, (_, i) => i * 11));
    const o = { rows: n, dims: d, k, chunkRows: 1000, memoryBudget: 5_500 * (d * 4 + 8) };
    const plain = await lloyd(await open(o), bytes, n, init, 3);
    const e = await open(o);
    expect(e.plan.residentRows).toBe(5_500);
    expect(await load(e, bytes, [[8000, 12_000]]), 'a load wholly past the budget keeps nothing').toBe(0);
    expect(await load(e, bytes, [[0, 4000], [4000, 8000]])).toBe(5_500);
    expectSame(await lloyd(e, bytes, n, init, 3, 5_500), plain, 'budget');
    // no budget at all: every load is a no-op
    const none = await open({ ...o, memoryBudget: 0 });
    expect(await load(none, bytes, [[0, n]])).toBe(0);
    expectSame(await lloyd(none, bytes, n, init, 3, 0), await lloyd(await open({ ...o, memoryBudget: 0 }), bytes, n, init, 3), 'no budget');
  });

  it('a non-finite row: not kept, and the first pass reports it with the same error and row as without a load', async () => {
    const n = 10_000, d = 8, k = 10;
    const x = normalData(n, d, 9);
    x[6_789 * d + 3] = Number.NaN;
    x[8_000 * d] = Number.POSITIVE_INFINITY;
    const bytes = bytesOf(x);
    const init = pickRows(x, d, Array.from({ length: k }, (_, i) => i));
    // 8 threads: the load of [5000, 10000) goes to 4 loaders, and two of them meet a bad row (6789, 8000)
    const o = { rows: n, dims: d, k, chunkRows: 1024, threads: 8 };
    const plainEngine = await open(o);
    const plainErr = await lloyd(plainEngine, bytes, n, init, 1).catch((err: unknown) => err);
    expect(plainErr).toBeInstanceOf(NonFiniteInputError);
    const e = await open(o);
    // the load resolves (no error) with the rows before the bad one
    expect(await load(e, bytes, [[5_000, n], [0, 5_000]])).toBe(6_789);
    const err = await lloyd(e, bytes, n, init, 1, 6_789).catch((er: unknown) => er);
    expect(err).toBeInstanceOf(NonFiniteInputError);
    expect((err as NonFiniteInputError).row).toBe(6_789);
    expect((err as Error).message).toBe((plainErr as Error).message);
    expect((err as NonFiniteInputError).row).toBe((plainErr as NonFiniteInputError).row);
  });

  it('cosine: a zero row is reported by the pass as without a load', async () => {
    const n = 5_000, d = 6, k = 5;
    const x = normalData(n, d, 11);
    x.fill(0, 3_210 * d, 3_211 * d);
    const bytes = bytesOf(x);
    const init = pickRows(x, d, [0, 1, 2, 3, 4]);
    const o = { rows: n, dims: d, k, metric: 'cosine' as const, chunkRows: 700, threads: 8 };
    const plainErr = await lloyd(await open(o), bytes, n, init, 1).catch((err: unknown) => err);
    const e = await open(o);
    expect(await load(e, bytes, [[0, n]])).toBe(3_210);
    const err = await lloyd(e, bytes, n, init, 1, 3_210).catch((er: unknown) => er);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toBe((plainErr as Error).message);
    expect((err as Error).message).toMatch(/row 3210 has zero norm/);
  });

  it('cancel: queued loads reject and keep nothing; the last resolved count stays exact; later loads work', async () => {
    const n = 40_000, d = 32, k = 32;
    const x = normalData(n, d, 13);
    const bytes = bytesOf(x);
    const init = pickRows(x, d, Array.from({ length: k }, (_, i) => i * 31));
    const o = { rows: n, dims: d, k, chunkRows: 5000 };
    const plain = await lloyd(await open(o), bytes, n, init, 2);
    const e = await open(o);
    const rb = e.plan.rowBytes;
    const outcomes: (number | 'cancelled')[] = [];
    const loads: Promise<void>[] = [];
    for (let r = 0; r < n; r += 2000) {
      loads.push(e.loadRows(bytes.subarray(r * rb, (r + 2000) * rb), r, 2000).then(
        (h) => { outcomes.push(h); },
        (err: unknown) => { expect(err).toBeInstanceOf(CancelledError); outcomes.push('cancelled'); },
      ));
      if (r === 4000) e.cancel();
    }
    await Promise.all(loads);
    // the loads admitted before cancel() reject (unless they already ran); those after it run
    expect(outcomes.slice(0, 3).every((v) => v === 'cancelled' || typeof v === 'number')).toBe(true);
    expect(outcomes.slice(3).every((v) => typeof v === 'number')).toBe(true);
    const last = outcomes[outcomes.length - 1] as number;
    const firstCancelled = outcomes.indexOf('cancelled');
    if (firstCancelled >= 0) expect(last).toBe(firstCancelled * 2000); // rows before the first dropped load
    expectSame(await lloyd(e, bytes, n, init, 2, last), plain, 'after cancel');
  });

  it('not while a pass is open; bad arguments; after close the loads reject', async () => {
    const n = 4_000, d = 4, k = 4;
    const x = normalData(n, d, 17);
    const bytes = bytesOf(x);
    const e = await open({ rows: n, dims: d, k, chunkRows: 1000 });
    e.setCentroids(pickRows(x, d, [0, 1, 2, 3]));
    await expect(e.loadRows(bytes, -1, 10)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(e.loadRows(bytes, 3_995, 10)).rejects.toThrow(/rows \[3995, 4005\) are out of range/);
    await expect(e.loadRows(bytes.subarray(0, 100), 0, 10)).rejects.toThrow(/the rows have 100 bytes, rowCount=10 × 16 bytes per row needs 160/);
    await expect(e.loadRows(bytes, 0, 0)).rejects.toThrow(/rowCount must be >= 1/);
    e.beginPass('fit');
    await expect(e.loadRows(bytes, 0, 10)).rejects.toThrow(/cannot load rows while a pass is running/);
    await e.finishPass();
    expect(await e.loadRows(bytes, 0, 100)).toBe(100);

    const c = await open({ rows: n, dims: d, k, chunkRows: 1000 });
    const pending = c.loadRows(bytes, 0, n);
    c.close();
    const out = await pending.then((h) => h, (err: unknown) => err);
    expect(out === n || out instanceof CancelledError).toBe(true);
    expect(c.loadsRows).toBe(false);
    await expect(c.loadRows(bytes, 0, 10)).rejects.toThrow(/the engine is closed/);
  });
});
