// The rows whose label changed since the previous pass (PassResult.reassigned, the kmcuda-style stop test): the CUDA
// backend counts its resident rows on the device, where their previous labels still are (backend.h changedRows),
// and the engine compares only the rest. It must equal the host diff of engine.labels() pass after pass — also
// after a cancelled pass (the engine keeps its labels, the device its previous ones), after a pass that feeds the
// resident rows as streamed chunks (the device's previous labels are then stale and must not be used), with every
// row resident and with some streamed.
import { describe, expect, it } from 'vitest';

import { CancelledError, type PassResult } from '../../native/index.js';
import { blobData, bytesOf, pickRows, runPass } from '../helpers/reference.js';
import { distinctRows, engineTracker } from './gpu-helpers.js';

const open = engineTracker();

function differing(a: Int32Array, b: Int32Array): number {
  let c = 0;
  for (let i = 0; i < a.length; i++) c += a[i] !== b[i] ? 1 : 0;
  return c;
}

describe('reassigned rows on the CUDA backend', () => {
  const n = 60_000, d = 24, k = 50, chunk = 4096;
  // blobs, and a poor start (rows of the first blobs only), so labels keep changing for several passes
  const x = blobData(n, d, 40, 71, 6, 1.5);
  const init = pickRows(x, d, distinctRows(6000, k, 72));

  for (const [what, memoryBudget] of [['every row resident', undefined], ['some rows streamed', 5 * chunk * 200]] as const) {
    it(`equals the host diff of the labels, pass after pass (${what})`, async () => {
      const e = await open({ rows: n, dims: d, k, chunkRows: chunk, ...(memoryBudget === undefined ? {} : { memoryBudget }) });
      if (memoryBudget !== undefined) expect(e.plan.residentRows).toBeLessThan(n);
      expect(e.plan.residentRows).toBeGreaterThan(0);
      e.setCentroids(init);
      let prev = new Int32Array(0);
      let checked = 0, nonZero = 0;
      for (let p = 0; p < 9; p++) {
        if (p === 4) {  // a cancelled pass: no labels change anywhere
          e.beginPass('fit');
          e.cancel();
          await expect(e.finishPass()).rejects.toBeInstanceOf(CancelledError);
        }
        const streamAll = p === 0 || p === 6;  // p = 6: the resident rows come as chunks (the device's copy goes stale)
        const r = await runPass<PassResult>(e, bytesOf(x), n, 'fit', { skipBelow: streamAll ? 0 : e.plan.residentRows });
        const labels = e.labels().slice();
        if (p > 0) {
          expect(r.reassigned, `pass ${p}`).toBe(differing(prev, labels));
          checked++;
          if (r.reassigned > 0) nonZero++;
        }
        prev = labels;
      }
      expect(checked).toBe(8);
      expect(nonZero).toBeGreaterThanOrEqual(3);  // the comparison saw real changes, not only zeros
    });
  }
});
