/**
 * A small seeded PRNG (xoshiro128**, seeded through splitmix32) so that init choices and synthetic data are the same
 * for the same seed on every machine and Node version (Math.random is neither seedable nor specified).
 * `stream` separates independent uses of one seed (init rows, k-means++ sample, data generation).
 */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;
  private spare: number | undefined;

  constructor(seed: number, stream = 0) {
    if (!Number.isSafeInteger(seed) || seed < 0) throw new RangeError(`seed must be a non-negative integer, got ${seed}`);
    let s = (seed >>> 0) ^ Math.imul(Math.floor(seed / 2 ** 32) >>> 0, 0x9e3779b9) ^ Math.imul(stream >>> 0, 0x85ebca6b);
    const next = () => {
      s = (s + 0x9e3779b9) | 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next(); this.b = next(); this.c = next(); this.d = next();
    if ((this.a | this.b | this.c | this.d) === 0) this.a = 1;
  }

  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a; this.d ^= this.b; this.b ^= this.c; this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result;
  }

  /** uniform in [0, 1) with 53 random bits */
  nextFloat(): number {
    return ((this.nextU32() >>> 5) * 67108864 + (this.nextU32() >>> 6)) / 9007199254740992;
  }

  /** uniform integer in [0, n), n ≤ 2^53 */
  nextInt(n: number): number {
    if (n <= 0x100000000) {
      // rejection sampling: exactly uniform
      const limit = 0x100000000 - (0x100000000 % n);
      for (;;) {
        const x = this.nextU32();
        if (x < limit) return x % n;
      }
    }
    return Math.floor(this.nextFloat() * n);
  }

  /** standard normal (Box–Muller, the second value kept for the next call) */
  normal(): number {
    if (this.spare !== undefined) {
      const v = this.spare;
      this.spare = undefined;
      return v;
    }
    let u = 0;
    while (u === 0) u = this.nextFloat();
    const r = Math.sqrt(-2 * Math.log(u));
    const theta = 2 * Math.PI * this.nextFloat();
    this.spare = r * Math.sin(theta);
    return r * Math.cos(theta);
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/**
 * `count` distinct integers from [0, n), in the order drawn (Floyd's algorithm: O(count) memory and time, whatever n).
 */
export function distinctIndices(rng: Rng, n: number, count: number): number[] {
  if (count > n) throw new RangeError(`cannot draw ${count} distinct rows from ${n}`);
  if (count * 2 > n && n <= 1 << 24) {
    // dense case: partial Fisher–Yates over the whole range
    const all = new Uint32Array(n);
    for (let i = 0; i < n; i++) all[i] = i;
    for (let i = 0; i < count; i++) {
      const j = i + rng.nextInt(n - i);
      const t = all[i]; all[i] = all[j]; all[j] = t;
    }
    return Array.from(all.subarray(0, count));
  }
  const chosen = new Set<number>();
  const order: number[] = [];
  for (let j = n - count; j < n; j++) {
    const t = rng.nextInt(j + 1);
    const pick = chosen.has(t) ? j : t;
    chosen.add(pick);
    order.push(pick);
  }
  // Floyd's draw order is biased towards late values: shuffle so that the order is uniform too
  for (let i = order.length - 1; i > 0; i--) {
    const j = rng.nextInt(i + 1);
    const t = order[i]; order[i] = order[j]; order[j] = t;
  }
  return order;
}

/** Above this many rows a bitset of them would take more than 16 MiB: the drawn rows go in a Set instead. */
const BITSET_MAX_ROWS = 1 << 27;

/**
 * The rows `distinctIndices(rng, n, count)` draws, ascending: the same set from the same generator state, for a
 * sample whose order does not matter (k-means++'s, read in row order). Floyd's draws are kept in a bitset and read
 * back in order, not put in a Set and sorted: the sort holds the JS thread several times longer, while the dataset's
 * sockets go unread.
 */
export function distinctIndicesSorted(rng: Rng, n: number, count: number): Float64Array {
  if (count > n) throw new RangeError(`cannot draw ${count} distinct rows from ${n}`);
  if ((count * 2 > n && n <= 1 << 24) || n > BITSET_MAX_ROWS) return Float64Array.from(distinctIndices(rng, n, count)).sort();
  const drawn = new Uint32Array(Math.ceil(n / 32));
  for (let j = n - count; j < n; j++) {
    const t = rng.nextInt(j + 1);
    const pick = (drawn[t >>> 5] >>> (t & 31)) & 1 ? j : t;
    drawn[pick >>> 5] |= 1 << (pick & 31);
  }
  const rows = new Float64Array(count);
  let m = 0;
  for (let w = 0; w < drawn.length; w++) {
    for (let bits = drawn[w]; bits !== 0; bits &= bits - 1) rows[m++] = w * 32 + (31 - Math.clz32(bits & -bits));
  }
  return rows;
}

