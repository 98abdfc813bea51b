// The ETA of a job's progress: from the observed convergence (the shift and reassigned trends toward their stops),
// not from maxIter; maxIter only bounds it.
import { describe, expect, it } from 'vitest';
import { iterationsLeft, makeProgress, queuedProgress } from '../../producer/progress.js';

/** Lloyd-like history: the shift and the reassigned fraction fall by `rate` per iteration. */
const history = (n: number, rate: number, shift0 = 1, moved0 = 0.2) =>
  Array.from({ length: n }, (_, i) => ({ shift: shift0 * rate ** i, reassignedFraction: moved0 * rate ** i }));

describe('iterationsLeft', () => {
  it('extrapolates a falling shift to its stop', () => {
    // 1 × 0.5^i reaches 1e-3 at i = 10: after iteration 6 (i = 5), 5 more
    expect(iterationsLeft({ history: history(6, 0.5), shiftStop: 1e-3 }, 6, 300)).toBe(5);
  });

  it('takes the sooner of the two stops, never more than maxIter allows', () => {
    const h = history(6, 0.5);
    expect(iterationsLeft({ history: h, shiftStop: 1e-9, reassignedStop: 0.05 }, 6, 300)).toBe(0); // 0.2 × 0.5^5 < 0.05
    expect(iterationsLeft({ history: h, shiftStop: 1e-9 }, 6, 300)).toBe(25);
    expect(iterationsLeft({ history: h, shiftStop: 1e-9 }, 6, 10)).toBe(4);
  });

  it('tolReassign 0 means no row moved: under one row of the dataset', () => {
    const h = history(6, 0.5, 1, 0.1);
    // 0.1 × 0.5^i < 0.5 / 1000 from i = 8: after iteration 6 (i = 5), 3 more
    expect(iterationsLeft({ history: h, reassignedStop: 0, rows: 1000 }, 6, 300)).toBe(3);
  });

  it("falls back to maxIter's bound without a falling trend or enough of one", () => {
    expect(iterationsLeft({ history: history(6, 1.1), shiftStop: 1e-3 }, 6, 300)).toBe(294);
    expect(iterationsLeft({ history: history(2, 0.5), shiftStop: 1e-3 }, 2, 300)).toBe(298);
    expect(iterationsLeft({ history: history(6, 0.5) }, 6, 300)).toBe(294); // stops unknown
    expect(iterationsLeft({ history: history(6, 0.5), shiftStop: NaN }, 6, 300)).toBe(294);
  });
});

describe('makeProgress', () => {
  it('gives an ETA of the iterations the trend needs, plus the assign pass', () => {
    const p = makeProgress({
      phase: 'iterating', iteration: 6, maxIter: 300, msPerIteration: 100,
      convergence: { history: history(6, 0.5), shiftStop: 1e-3 },
    });
    expect(p.etaMs).toBe(600);
    const bound = makeProgress({ phase: 'iterating', iteration: 6, maxIter: 300, msPerIteration: 100 });
    expect(bound.etaMs).toBe(29_500);
  });

  it('a queued job has a report too: iteration 0, nothing measured', () => {
    expect(queuedProgress(40, 7)).toEqual({
      phase: 'queued', iteration: 0, maxIter: 40, inertia: null, reassigned: null, reassignedFraction: null, shift: null, settledFraction: null, etaMs: null, updatedAt: 7,
    });
  });
});
