// With every row resident, a pass that changed few labels brings only the changed rows' labels to the host
// (PassResult.labelsDown 'changed', backend.h PassTotals.labelsAsChanges); the engine applies them to the previous
// pass's labels in place. Its labels must equal, pass after pass, those of an engine fed every row as a streamed
// chunk (which brings every label down) — through a cancelled pass, a pass where more rows changed than the list
// holds (the caller permuted the centroids), one that left a cluster empty (the farthest rows read the labels), a
// pass with distances, and chained passes.
import { describe, expect, it } from 'vitest';

import { CancelledError, type Engine, type PassResult } from '../../native/index.js';
import { blobData, bytesOf, pickRows, runPass } from '../helpers/reference.js';
import { distinctRows, engineTracker } from './gpu-helpers.js';

const open = engineTracker();

describe('labels brought down as the changed rows', () => {
  const n = 60_013, d = 24, k = 40, chunk = 8192;
  const x = blobData(n, d, k, 91, 8, 1);
  const data = bytesOf(x);
  const init = pickRows(x, d, distinctRows(n, k, 92));

  it('equal every row brought down, pass after pass', async () => {
    const opts = { rows: n, dims: d, k, chunkRows: chunk, precision: 'fp32' as const };
    const resident = await open(opts);
    const streamed = await open(opts);
    resident.setCentroids(init);
    streamed.setCentroids(init);
    let held = 0;  // the rows the resident engine holds: its feeds start there
    const both = async (mode: 'fit' | 'assign', distances = false) => {
      const a = await runPass<PassResult>(resident, data, n, mode, { skipBelow: held, distances });
      const b = await runPass<PassResult>(streamed, data, n, mode, { skipBelow: 0, distances });
      held = a.heldRows;
      return [a, b] as const;
    };
    const check = (what: string, a: PassResult, b: PassResult, e1: Engine = resident, e2: Engine = streamed) => {
      expect(b.labelsDown, `${what}: streamed rows bring every label`).toBe('every');
      expect(a.reassigned, `${what}: reassigned`).toBe(b.reassigned);
      expect(Array.from(a.counts), `${what}: counts`).toEqual(Array.from(b.counts));
      expect(Buffer.from(e1.labels().buffer).equals(Buffer.from(e2.labels().buffer)), `${what}: labels`).toBe(true);
    };
    const downs: string[] = [];
    for (let p = 0; p < 12; p++) {
      if (p === 6) {  // a cancelled pass changes no label anywhere
        resident.beginPass('fit');
        resident.cancel();
        await expect(resident.finishPass()).rejects.toBeInstanceOf(CancelledError);
      }
      const [a, b] = await both('fit');
      check(`pass ${p}`, a, b);
      downs.push(a.labelsDown);
    }
    expect(held, 'every row resident').toBe(n);
    expect(downs[0], 'the first pass has no previous labels').toBe('every');
    expect(downs.slice(-4), `converged passes: ${downs}`).toEqual(['changed', 'changed', 'changed', 'changed']);

    // the caller permutes the centroids: nearly every row changes, more than the list holds
    const permute = (e: Engine) => {
      const c = e.centroids(), out = new Float32Array(c.length);
      for (let j = 0; j < k; j++) out.set(c.subarray(((j + 7) % k) * d, ((j + 7) % k + 1) * d), j * d);
      e.setCentroids(out);
    };
    permute(resident);
    permute(streamed);
    let [a, b] = await both('fit');
    check('after a permutation', a, b);
    expect(a.reassigned).toBeGreaterThan(n / 2);
    expect(a.labelsDown, 'the list overflowed: every label came down').toBe('every');

    // a duplicate centroid: one of the two comes out empty, and the farthest rows re-seed it
    for (let p = 0; p < 4; p++) [a, b] = await both('fit');
    check('converged again', a, b);
    const duplicate = (e: Engine) => {
      const c = e.centroids();
      c.copyWithin(5 * d, 4 * d, 5 * d);
      e.setCentroids(c);
    };
    duplicate(resident);
    duplicate(streamed);
    [a, b] = await both('fit');
    expect(a.emptyReseeded).toBeGreaterThan(0);
    check('a cluster left empty', a, b);
    expect(a.labelsDown).toBe('every');
    expect(Buffer.from(resident.centroids().buffer).equals(Buffer.from(streamed.centroids().buffer)), 'the re-seeded centroids').toBe(true);

    // chained passes (the engine begins each next fit pass itself), then the final pass with distances
    for (let p = 0; p < 6; p++) {
      const chain = { tol: 0, tolReassign: 0, variance: 1, passesLeft: 5 - p };
      a = await runPass<PassResult>(resident, data, n, 'fit', { skipBelow: held, sayFirstRow: true, chain });
      b = await runPass<PassResult>(streamed, data, n, 'fit', { skipBelow: 0 });
      check(`chained pass ${p}`, a, b);
    }
    [a, b] = await both('assign', true);
    check('the final pass', a, b);
    expect(a.labelsDown, 'distances come down for every row, labels with them').toBe('every');
    expect(Buffer.from(resident.distances().buffer).equals(Buffer.from(streamed.distances().buffer)), 'distances').toBe(true);
  });
});
