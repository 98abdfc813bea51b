// beginPass `chain` (native/index.ts): with the caller's stopping rule, the engine begins the next fit pass itself when
// the rule says it follows, and the caller's next matching beginPass takes it over — the device need not wait for the
// round trip through JS between passes. The passes must be those the caller would have begun: same bits, the same
// stopping point, and any other call abandons the engine's pass. CPU backend here; test/gpu runs the job's driver
// (which chains on device engines) on CUDA.
import { afterAll, describe, expect, it } from 'vitest';

import { Engine, InvalidArgumentError, type PassResult } from '../../native/index.js';
import { blobData, bytesOf, pickRows, runPass } from '../helpers/reference.js';

const engines: Engine[] = [];
afterAll(() => engines.forEach((e) => e.close()));

const n = 6_011, d = 6, k = 10;
const x = blobData(n, d, k, 51, 5, 2.5);
const data = bytesOf(x);
const init = pickRows(x, d, [3, 600, 1200, 1800, 2400, 3000, 3600, 4200, 4800, 5400]);

async function open(memoryBudget?: number): Promise<Engine> {
  const e = await Engine.open({
    rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', chunkRows: 1000, threads: 2,
    ...(memoryBudget === undefined ? {} : { memoryBudget }),
  });
  engines.push(e);
  e.setCentroids(init);
  return e;
}

const bits = (a: Float32Array) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));
const strip = ({ ms: _ms, chained: _c, begunByEngine: _b, rowsSettled: _s, counts, ...r }: PassResult) => ({ ...r, counts: Array.from(counts) });
const stops = (r: PassResult, tol: number, tolReassign: number, variance: number, iteration: number, maxIter: number) =>
  r.reassigned / n <= tolReassign || r.shift <= tol * variance || iteration >= maxIter;

/** Lloyd as the job's driver runs it: fit passes until the rule stops (each told the rule when `chain`), then assign. */
async function lloyd(e: Engine, chain: boolean, rule: { tol: number; tolReassign: number; maxIter: number }) {
  const results: PassResult[] = [];
  let variance = NaN;
  for (let it = 1; ; it++) {
    const first = it === 1;
    const r = await runPass<PassResult>(e, data, n, 'fit', {
      skipBelow: first ? 0 : results.at(-1)!.heldRows, sayFirstRow: true, dataVariance: first,
      chain: chain ? { ...rule, variance, passesLeft: rule.maxIter - it } : undefined,
    });
    if (first) variance = r.dataVariance;
    results.push(r);
    if (stops(r, rule.tol, rule.tolReassign, variance, it, rule.maxIter)) break;
  }
  results.push(await runPass<PassResult>(e, data, n, 'assign', { skipBelow: results.at(-1)!.heldRows, sayFirstRow: true, dataVariance: false }));
  return { results, centroids: e.centroids(), labels: e.labels() };
}

describe('beginPass chain', () => {
  it('gives the passes the caller would have begun, and stops where the caller\'s rule stops', async () => {
    for (const rule of [{ tol: 0, tolReassign: 0, maxIter: 100 }, { tol: 1e-3, tolReassign: 0, maxIter: 100 }, { tol: 0, tolReassign: 0, maxIter: 3 }]) {
      const plain = await lloyd(await open(), false, rule);
      const e = await open();
      expect(e.plan.residentRows).toBe(n);
      const chained = await lloyd(e, true, rule);
      expect(chained.results.map(strip)).toEqual(plain.results.map(strip));
      expect(bits(chained.centroids)).toEqual(bits(plain.centroids));
      expect(Array.from(chained.labels)).toEqual(Array.from(plain.labels));
      const fits = chained.results.slice(0, -1);
      expect(fits.length).toBeGreaterThanOrEqual(3);
      // every fit pass but the last began the next one; every one after the first was the engine's, taken over
      expect(fits.map((r) => r.chained)).toEqual(fits.map((_, i) => i < fits.length - 1));
      expect(fits.map((r) => r.begunByEngine)).toEqual(fits.map((_, i) => i > 0));
      expect(plain.results.every((r) => !r.chained && !r.begunByEngine)).toBe(true);
      expect(chained.results.at(-1)!.begunByEngine).toBe(false); // the assign pass is the caller's
    }
  });

  it('takes some rows resident and streams the rest the same way', async () => {
    const budget = 2_500 * (d * 4 + 8) + 3 * 1000 * d * 4;
    const rule = { tol: 0, tolReassign: 0, maxIter: 100 };
    const plain = await lloyd(await open(budget), false, rule);
    const e = await open(budget);
    expect(e.plan.residentRows).toBeGreaterThan(0);
    expect(e.plan.residentRows).toBeLessThan(n);
    const chained = await lloyd(e, true, rule);
    expect(chained.results.map(strip)).toEqual(plain.results.map(strip));
    expect(bits(chained.centroids)).toEqual(bits(plain.centroids));
    expect(chained.results.slice(1, -1).every((r) => r.begunByEngine)).toBe(true);
  });

  it('is abandoned by a pass that is not it, setCentroids, cancel and loadRows', async () => {
    const rule = { tol: 0, tolReassign: 0, variance: NaN, passesLeft: 50 };
    // each case: the same calls on an engine whose first pass chains and on one whose first pass does not
    const both = async (then: (e: Engine) => Promise<PassResult>) => {
      const out: PassResult[] = [];
      for (const chain of [rule, undefined]) {
        const e = await open();
        const r1 = await runPass<PassResult>(e, data, n, 'fit', { sayFirstRow: true, chain });
        expect(r1.chained).toBe(chain !== undefined);
        out.push(await then(e));
      }
      expect(out[0].begunByEngine).toBe(false);
      expect(strip(out[0])).toEqual(strip(out[1]));
      return out[0];
    };
    const fit = (e: Engine, dataVariance: boolean) =>
      runPass<PassResult>(e, data, n, 'fit', { skipBelow: n, sayFirstRow: true, dataVariance });

    // an assign pass instead: the engine's fit pass is replaced; so is it by a fit pass that asks for the data variance
    // (the engine's skips it), or that says it streams every row
    await both((e) => runPass<PassResult>(e, data, n, 'assign', { skipBelow: n, sayFirstRow: true, dataVariance: false }));
    await both((e) => fit(e, true));
    await both((e) => runPass<PassResult>(e, data, n, 'fit', { sayFirstRow: true, dataVariance: false }));
    // setCentroids: the next pass starts from the caller's centroids
    const again = await both((e) => { e.setCentroids(init); return fit(e, false); });
    expect(again.reassigned).toBe(0); // init's labels again: those of the first pass
    // cancel: the next beginPass starts afresh, and its pass completes
    await both((e) => { e.cancel(); return fit(e, false); });
    // loadRows: the engine's pass is abandoned, the load goes through, the next pass is the caller's
    await both(async (e) => {
      await e.loadRows(data.subarray(0, 100 * d * 4), 0, 100);
      return fit(e, false);
    });
  });

  it('names a bad rule', async () => {
    const e = await open();
    const bad = (chain: unknown) => () => e.beginPass('fit', { chain } as Parameters<Engine['beginPass']>[1]);
    expect(bad(5)).toThrow(InvalidArgumentError);
    expect(bad(5)).toThrow(/^beginPass chain must be an object \{ tol, tolReassign, variance, passesLeft \}$/);
    expect(bad({ tol: 0, tolReassign: 0, variance: NaN })).toThrow(/beginPass chain.passesLeft must be a number/);
    expect(bad({ tol: -1, tolReassign: 0, variance: NaN, passesLeft: 1 })).toThrow(/chain.tol must be a finite number >= 0/);
    expect(bad({ tol: 0, tolReassign: 0, variance: -2, passesLeft: 1 })).toThrow(/chain.variance/);
    expect(bad({ tol: 0, tolReassign: 0, variance: 1, passesLeft: 1.5 })).toThrow(/chain.passesLeft must be an integer/);
  });
});
