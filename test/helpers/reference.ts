/**
 * A float64 reference k-means, written for clarity, not speed: the yardstick for the engine's exactness
 * (DESIGN.md "Numerics": fp32 labels equal a float64 reference except where the two best distances are within a
 * relative 1e-6). Used by the CPU engine tests and, later, by the GPU tests.
 *
 * Everything is plain float64 on the float32 input values: distances Σ(x − c)², ties to the lowest index,
 * centroid means, spherical (cosine) normalization, and sklearn's relocation of empty clusters (the farthest
 * rows, (distance desc, row asc), skipping a row whose cluster would become empty in turn).
 */

export type Metric = 'l2' | 'cosine';

/**
 * Seeded generator (mulberry32) with a Box–Muller normal. Not core/kmeans/prng.ts on purpose: that one (xoshiro128**)
 * decides init rows and synthetic datasets, i.e. the code under test; the reference's test data must not move when it
 * changes, and every engine and GPU test's data (ties, sklearn comparisons) is defined by this sequence.
 */
export class Rng {
  private s: number;
  private spare: number | undefined;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  uniform(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  normal(): number {
    if (this.spare !== undefined) {
      const v = this.spare;
      this.spare = undefined;
      return v;
    }
    let u = 0;
    while (u === 0) u = this.uniform();
    const v = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }
  int(n: number): number {
    return Math.min(n - 1, Math.floor(this.uniform() * n));
  }
}

/** n×d standard normal rows. */
export function normalData(n: number, d: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  const x = new Float32Array(n * d);
  for (let i = 0; i < x.length; i++) x[i] = rng.normal();
  return x;
}

/** n×d rows around `centers` well-separated blob centers (spread `spread`, centers ~ N(0, scale²)). */
export function blobData(n: number, d: number, centers: number, seed: number, scale = 10, spread = 1): Float32Array {
  const rng = new Rng(seed);
  const c = new Float64Array(centers * d);
  for (let i = 0; i < c.length; i++) c[i] = rng.normal() * scale;
  const x = new Float32Array(n * d);
  for (let i = 0; i < n; i++) {
    const b = rng.int(centers);
    for (let j = 0; j < d; j++) x[i * d + j] = c[b * d + j] + rng.normal() * spread;
  }
  return x;
}

/** Rows `rows` of x (n×d) as a new array: initial centroids drawn from the data. */
export function pickRows(x: Float32Array, d: number, rows: number[]): Float32Array {
  const out = new Float32Array(rows.length * d);
  rows.forEach((r, i) => out.set(x.subarray(r * d, (r + 1) * d), i * d));
  return out;
}

/** float32 → IEEE binary16 bits (round to nearest even), and back. */
export function toF16(x: Float32Array): Uint16Array {
  const out = new Uint16Array(x.length);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (let i = 0; i < x.length; i++) {
    f[0] = x[i];
    const bits = u[0];
    const sign = (bits >>> 16) & 0x8000;
    const exp = (bits >>> 23) & 0xff;
    let mant = bits & 0x7fffff;
    if (exp === 0xff) {
      out[i] = sign | 0x7c00 | (mant ? 0x200 : 0);
      continue;
    }
    const e = exp - 127 + 15;
    if (e >= 0x1f) {
      out[i] = sign | 0x7c00;
      continue;
    }
    if (e <= 0) {
      if (e < -10) {
        out[i] = sign;
        continue;
      }
      mant |= 0x800000;
      const shift = 14 - e;
      let h = mant >>> shift;
      const rem = mant & ((1 << shift) - 1), half = 1 << (shift - 1);
      if (rem > half || (rem === half && (h & 1))) h++;
      out[i] = sign | h;
      continue;
    }
    let h = (e << 10) | (mant >>> 13);
    const rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
    out[i] = sign | h;
  }
  return out;
}

export function fromF16(h: Uint16Array): Float32Array {
  const out = new Float32Array(h.length);
  for (let i = 0; i < h.length; i++) {
    const s = h[i] & 0x8000 ? -1 : 1;
    const e = (h[i] >>> 10) & 0x1f, m = h[i] & 0x3ff;
    out[i] = e === 0 ? s * m * 2 ** -24 : e === 0x1f ? (m ? NaN : s * Infinity) : s * (1 + m / 1024) * 2 ** (e - 15);
  }
  return out;
}

/** Rows normalized to unit length in float64 (cosine). */
export function normalizeRows(x: ArrayLike<number>, n: number, d: number): Float64Array {
  const out = new Float64Array(n * d);
  for (let i = 0; i < n; i++) {
    let s = 0;
    for (let j = 0; j < d; j++) s += x[i * d + j] * x[i * d + j];
    const inv = 1 / Math.sqrt(s);
    for (let j = 0; j < d; j++) out[i * d + j] = x[i * d + j] * inv;
  }
  return out;
}

export interface Assignment {
  labels: Int32Array;
  /** distance to the chosen centroid: Σ(x−c)² (l2) or 1 − cos (cosine) */
  dist: Float64Array;
  /** best and second best squared-L2 distance (for the tie test) */
  d1: Float64Array;
  d2: Float64Array;
  inertia: number;
}

/** Exact-as-float64 assignment. For cosine, x must already be unit rows and c unit centroids. */
export function assign(x: ArrayLike<number>, n: number, d: number, c: ArrayLike<number>, k: number, metric: Metric): Assignment {
  const labels = new Int32Array(n), dist = new Float64Array(n), d1 = new Float64Array(n), d2 = new Float64Array(n);
  const cn = new Float64Array(k);
  for (let j = 0; j < k; j++) {
    let s = 0;
    for (let t = 0; t < d; t++) s += c[j * d + t] * c[j * d + t];
    cn[j] = Math.sqrt(s);
  }
  let inertia = 0;
  for (let i = 0; i < n; i++) {
    let best = Infinity, second = Infinity, bi = 0;
    for (let j = 0; j < k; j++) {
      let s = 0;
      for (let t = 0; t < d; t++) {
        const v = x[i * d + t] - c[j * d + t];
        s += v * v;
      }
      if (s < best) {
        second = best;
        best = s;
        bi = j;
      } else if (s < second) {
        second = s;
      }
    }
    labels[i] = bi;
    d1[i] = best;
    d2[i] = second;
    if (metric === 'l2') {
      dist[i] = best;
    } else {
      let dot = 0, xx = 0;
      for (let t = 0; t < d; t++) {
        dot += x[i * d + t] * c[bi * d + t];
        xx += x[i * d + t] * x[i * d + t];
      }
      dist[i] = 1 - dot / (Math.sqrt(xx) * cn[bi]);
    }
    inertia += dist[i];
  }
  return { labels, dist, d1, d2, inertia };
}

/** Is row i a true tie in the reference (two best distances within a relative `rel`)? */
export function isTie(a: Assignment, i: number, rel = 1e-6): boolean {
  return a.d2[i] - a.d1[i] <= rel * Math.max(a.d2[i], 1e-30);
}

export interface UpdateResult {
  centroids: Float64Array;
  counts: Float64Array;
  emptyReseeded: number;
}

/** Means of the assigned rows; empty clusters re-seeded with the farthest rows; cosine renormalized. */
export function update(
  x: ArrayLike<number>, n: number, d: number, c: ArrayLike<number>, k: number, a: Assignment, metric: Metric,
): UpdateResult {
  const sums = new Float64Array(k * d), counts = new Float64Array(k);
  for (let i = 0; i < n; i++) {
    const l = a.labels[i];
    counts[l]++;
    for (let t = 0; t < d; t++) sums[l * d + t] += x[i * d + t];
  }
  const assigned = Float64Array.from(counts);
  const order = Array.from({ length: n }, (_, i) => i).sort((p, q) => a.dist[q] - a.dist[p] || p - q);
  let cand = 0, emptyReseeded = 0;
  for (let j = 0; j < k; j++) {
    if (counts[j] !== 0) continue;
    while (cand < order.length) {
      const r = order[cand++], l = a.labels[r];
      if (counts[l] <= 1) continue;
      for (let t = 0; t < d; t++) {
        sums[l * d + t] -= x[r * d + t];
        sums[j * d + t] = x[r * d + t];
      }
      counts[l]--;
      counts[j] = 1;
      emptyReseeded++;
      break;
    }
  }
  const out = Float64Array.from(c as ArrayLike<number>);
  for (let j = 0; j < k; j++) {
    if (counts[j] === 0) continue;
    const m = new Float64Array(d);
    for (let t = 0; t < d; t++) m[t] = sums[j * d + t] / counts[j];
    if (metric === 'cosine') {
      let s = 0;
      for (let t = 0; t < d; t++) s += m[t] * m[t];
      if (!(s > 0)) continue;
      const inv = 1 / Math.sqrt(s);
      for (let t = 0; t < d; t++) m[t] *= inv;
    }
    out.set(m, j * d);
  }
  return { centroids: out, counts: assigned, emptyReseeded };
}

/** mean over features of the per-feature (population) variance: sklearn's tol scale. */
export function meanVariance(x: ArrayLike<number>, n: number, d: number): number {
  let total = 0;
  for (let t = 0; t < d; t++) {
    let m = 0;
    for (let i = 0; i < n; i++) m += x[i * d + t];
    m /= n;
    let v = 0;
    for (let i = 0; i < n; i++) v += (x[i * d + t] - m) ** 2;
    total += v / n;
  }
  return total / d;
}

export interface LloydStep {
  /** the centroids the step assigned with */
  centroids: Float64Array;
  assignment: Assignment;
}

/** Lloyd iterations; centroids rounded to float32 after each update when `f32Centroids` (as the engine stores them). */
export function lloyd(
  x: ArrayLike<number>, n: number, d: number, init: ArrayLike<number>, k: number, iterations: number, metric: Metric,
  f32Centroids = true,
): { steps: LloydStep[]; centroids: Float64Array } {
  let c: Float64Array = Float64Array.from(init as ArrayLike<number>);
  const steps: LloydStep[] = [];
  for (let it = 0; it < iterations; it++) {
    const a = assign(x, n, d, c, k, metric);
    steps.push({ centroids: c, assignment: a });
    c = update(x, n, d, c, k, a, metric).centroids;
    if (f32Centroids) c = Float64Array.from(Float32Array.from(c));
  }
  return { steps, centroids: c };
}

// ---- driving an engine in tests (no dependency on the engine's module: structural types) ----------------------

export interface PassEngine {
  readonly plan: { chunkRows: number; buffers: number; residentRows: number; rowBytes: number };
  buffer(i: number): Buffer;
  beginPass(mode: 'fit' | 'assign', options?: {
    distances?: boolean; dataVariance?: boolean; firstRow?: number;
    chain?: { tol: number; tolReassign: number; variance: number; passesLeft: number };
  }): void;
  feed(buffer: number, firstRow: number, rowCount: number): Promise<void>;
  finishPass(): Promise<unknown>;
}

/**
 * One pass over `data` (rows × rowBytes, in the engine's dtype), the way the driver does it: rows in order, up to
 * plan.buffers feeds in flight, rows below `skipBelow` not fed (resident). chunk: rows per feed (≤ plan.chunkRows).
 */
export async function runPass<R>(
  engine: PassEngine, data: Uint8Array, rows: number, mode: 'fit' | 'assign',
  opts: {
    distances?: boolean; chunk?: number; skipBelow?: number; dataVariance?: boolean; sayFirstRow?: boolean;
    /** called right after beginPass, before any feed (as the pass runner's onBegin) */
    onBegin?: () => void;
    /** beginPass's chain (the stopping rule that lets the engine begin the next fit pass itself) */
    chain?: { tol: number; tolReassign: number; variance: number; passesLeft: number };
  } = {},
): Promise<R> {
  const { chunkRows, buffers, rowBytes } = engine.plan;
  const chunk = Math.min(opts.chunk ?? chunkRows, chunkRows);
  // sayFirstRow: beginPass is told where the feeds start (firstRow), as the job's pass runner does
  const firstRow = opts.sayFirstRow ? opts.skipBelow ?? 0 : undefined;
  engine.beginPass(mode, { distances: opts.distances ?? false, dataVariance: opts.dataVariance ?? true, firstRow, chain: opts.chain });
  opts.onBegin?.();
  const inFlight: (Promise<void> | undefined)[] = new Array(buffers);
  let b = 0;
  for (let first = opts.skipBelow ?? 0; first < rows; first += chunk) {
    const count = Math.min(chunk, rows - first);
    if (inFlight[b]) await inFlight[b];
    engine.buffer(b).set(data.subarray(first * rowBytes, (first + count) * rowBytes));
    inFlight[b] = engine.feed(b, first, count);
    inFlight[b]!.catch(() => undefined);
    b = (b + 1) % buffers;
  }
  await Promise.all(inFlight.filter(Boolean));
  return (await engine.finishPass()) as R;
}

export function bytesOf(a: Float32Array | Uint16Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}
