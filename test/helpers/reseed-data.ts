// Data on which a cluster empties in the middle of a fit (the second pass), for the re-seeding tests of both
// backends (test/unit/engine-reseed.test.ts, test/gpu/cuda-reseed.test.ts).
//
// Along x0: a group A at 0, a few rows P at 2.3 and Q at 7.7, a group C at 10 (every dimension with noise 0.02,
// so no row crosses a midpoint: 10σ), the groups interleaved so that every chunk holds all of them. Centroids
// start at x0 = −3, 5, 13. Pass 1: A → c0, P and Q → c1 (2.7 away against 5.3), C → c2; the means move c0 to 0,
// c1 to 5, c2 to 10. Pass 2: P is now 2.3 from c0 against 2.7 from c1, Q likewise goes to c2 — c1 is empty and
// takes the row farthest from its centroid (one of P or Q, ~2.3 away; A and C rows are ~0.06 away).
import { Rng } from './reference.js';

export function emptiesMidFit(n: number, d = 8): { x: Float32Array; n: number; d: number; k: number; init: Float32Array } {
  const rng = new Rng(4242);
  const x = new Float32Array(n * d);
  for (let i = 0; i < n; i++) {
    const g = i % 100;
    const at = g < 45 ? 0 : g === 45 ? 2.3 : g === 46 ? 7.7 : 10;
    for (let j = 0; j < d; j++) x[i * d + j] = (j === 0 ? at : 0) + 0.02 * rng.normal();
  }
  const k = 3;
  const init = new Float32Array(k * d);
  [-3, 5, 13].forEach((v, c) => { init[c * d] = v; });
  return { x, n, d, k, init };
}
