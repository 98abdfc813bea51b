// distinctIndicesSorted against distinctIndices: the same rows from the same seed, ascending, in every regime of
// the draw (dense Fisher–Yates, Floyd's over a bitset, Floyd's over a Set past the bitset's size).
import { describe, expect, it } from 'vitest';

import { distinctIndices, distinctIndicesSorted, Rng } from '../../core/kmeans/prng.js';

describe('distinctIndicesSorted', () => {
  const shapes: [n: number, count: number][] = [
    [1, 0], [1, 1], [33, 33], [100, 60], [1_000, 10], [65_537, 4_096], [1_000_000, 65_536], [(1 << 27) + 5, 1_000],
  ];
  for (const [n, count] of shapes) {
    it(`${count} of ${n} rows: the rows distinctIndices draws, sorted`, () => {
      for (const seed of [0, 1, 987_654_321]) {
        const expected = Float64Array.from(distinctIndices(new Rng(seed, 2), n, count)).sort();
        const got = distinctIndicesSorted(new Rng(seed, 2), n, count);
        expect(got.length).toBe(count);
        expect(Buffer.compare(Buffer.from(got.buffer), Buffer.from(expected.buffer)), `seed ${seed}`).toBe(0);
        for (let i = 1; i < got.length; i++) if (!(got[i - 1] < got[i])) throw new Error(`not ascending at ${i}`);
      }
    });
  }

  it('another seed draws other rows; more rows than there are is an error', () => {
    const a = distinctIndicesSorted(new Rng(1, 2), 1_000_000, 1_000);
    const b = distinctIndicesSorted(new Rng(2, 2), 1_000_000, 1_000);
    expect(Buffer.compare(Buffer.from(a.buffer), Buffer.from(b.buffer))).not.toBe(0);
    expect(() => distinctIndicesSorted(new Rng(1), 10, 11)).toThrow(/cannot draw 11 distinct rows from 10/);
  });
});
