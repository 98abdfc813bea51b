/**
 * The checkpoint pacer: checkpointEvery iterations AND the minimum interval (worker/checkpoints/pacer.ts), on a clock
 * the test moves by hand.
 */
import { describe, expect, it } from 'vitest';
import { CheckpointPacer } from '../../worker/checkpoints/pacer.js';

function clocked(every: number, minMs: number) {
  let t = 1000;
  const pacer = new CheckpointPacer(every, minMs, () => t);
  return { pacer, advance: (ms: number) => (t += ms) };
}

describe('CheckpointPacer', () => {
  it('with no interval, takes every checkpointEvery-th iteration', () => {
    const { pacer } = clocked(3, 0);
    expect([1, 2, 3, 4, 5, 6, 7, 8, 9].filter((i) => pacer.take(i))).toEqual([3, 6, 9]);
  });

  it('skips due iterations until the interval has passed since the last checkpoint (or the start)', () => {
    const { pacer, advance } = clocked(1, 100);
    const taken: number[] = [];
    for (let i = 1; i <= 12; i++) {
      advance(30); // 30 ms iterations
      if (pacer.take(i)) taken.push(i);
    }
    // 120 ms after the start, then every 4th iteration (120 ms ≥ 100 ms)
    expect(taken).toEqual([4, 8, 12]);
  });

  it('slow iterations keep one checkpoint per checkpointEvery', () => {
    const { pacer, advance } = clocked(2, 1000);
    const taken: number[] = [];
    for (let i = 1; i <= 6; i++) {
      advance(5000);
      if (pacer.take(i)) taken.push(i);
    }
    expect(taken).toEqual([2, 4, 6]);
  });

  it('checkpointEvery 0 never takes one', () => {
    const { pacer, advance } = clocked(0, 0);
    advance(1e6);
    expect([1, 2, 3].some((i) => pacer.take(i))).toBe(false);
  });
});
