/**
 * Initial centroids, deterministic by seed:
 *   random   — k distinct rows drawn by the seeded PRNG (in draw order)
 *   kmeans++ — the engine's greedy k-means++ over a seeded sample of max(256·k, 2^16) rows (all rows when there
 *              are fewer; capped by a memory budget, never below k), read with coalesced reads. Its cost is
 *              k·(2+ln k) passes over the sample, so running it on every row made init most of a short fit;
 *              256 rows per centroid is FAISS's default training sample and is plenty to place the seeds.
 *   given    — a float32 K×D array, checked for shape and finiteness
 */
import { NonFiniteInputError, type DType, type Metric } from '../../native/index.js';
import type { RowSource } from '../dataset/row-source.js';
import { bf16BitsToF32, decodeF16, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../formats/half.js';
import { KmeansSpecError } from './errors.js';
import { distinctIndices, distinctIndicesSorted, Rng } from './prng.js';
import { gatherRows } from './row-gather.js';
import type { InitMethod, KmeansEngine, KmeansSpec } from './types.js';

/** PRNG streams of one seed, so that changing one use never shifts another */
const STREAM_RANDOM_INIT = 1;
const STREAM_PP_SAMPLE = 2;

export interface InitOptions {
  /** bytes of rows k-means++ may hold in memory (default 256 MiB) */
  sampleBudgetBytes?: number;
}

/**
 * What an init reads of the dataset: the given centroids (checked), the random rows, or k-means++'s sample. None of it
 * needs the engine, so a caller may start it before the engine opens (readInitRows, then RunKmeansOptions.initRows):
 * the read overlaps the open (tens of ms on a CUDA engine), a pod's cached dataset file included.
 */
export type InitRows =
  | { kind: 'given'; centroids: Float32Array }
  | { kind: 'random'; rows: Float32Array; picks: number[] }
  | { kind: 'kmeans++'; rows: number; sample: Buffer; sampleRows?: Float64Array };

export async function readInitRows(source: RowSource, spec: Pick<KmeansSpec, 'init' | 'k' | 'seed'>, options: InitOptions = {}): Promise<InitRows> {
  const { k } = spec;
  if (spec.init instanceof Float32Array) return { kind: 'given', centroids: checkGivenCentroids(spec.init, k, source.dims) };
  if (spec.init === 'random') {
    const picks = distinctIndices(new Rng(spec.seed, STREAM_RANDOM_INIT), source.rows, k);
    const rows = await readRowsAsF32(source, picks);
    const bad = rows.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) {
      const row = picks[Math.floor(bad / source.dims)];
      throw new NonFiniteInputError(`row ${row} has a non-finite value (NaN or Inf)`, row);
    }
    return { kind: 'random', rows, picks };
  }
  if (spec.init === 'kmeans++') {
    return { kind: 'kmeans++', ...(await kmeansPlusPlusSample(source, k, spec.seed, options.sampleBudgetBytes ?? 256 << 20)) };
  }
  throw new KmeansSpecError(`unknown init '${String(spec.init)}' (kmeans++ | random | centroids)`);
}

/** The engine's initial centroids from what readInitRows read (k-means++ runs on the engine). */
export async function applyInit(engine: KmeansEngine, dims: number, spec: Pick<KmeansSpec, 'metric' | 'seed'>, read: InitRows): Promise<InitMethod> {
  switch (read.kind) {
    case 'given':
      engine.setCentroids(prepareCentroids(read.centroids, dims, spec.metric));
      return 'given';
    case 'random':
      engine.setCentroids(prepareCentroids(asKept(read, dims, engine.plan.keptDtype), dims, spec.metric));
      return 'random';
    case 'kmeans++':
      try {
        await engine.initKmeansPlusPlus(read.sample, read.rows, spec.seed);
      } catch (err) {
        // the engine numbers the rows of the sample ("sample row 12 …"): name the dataset's row instead
        if (err instanceof NonFiniteInputError && err.row >= 0 && err.row < read.rows) {
          const row = read.sampleRows ? read.sampleRows[err.row] : err.row;
          throw new NonFiniteInputError(err.message.replace(/^sample row \d+/, `row ${row}`), row);
        }
        throw err;
      }
      return 'kmeans++';
  }
}

/**
 * The random rows as the engine keeps the dataset's rows: an fp16/bf16 job over f32 rows rounds them (the engine's
 * rounding, native/src/row_narrowing.h), so that it starts where the job over the rounded dataset would.
 */
function asKept(read: { rows: Float32Array; picks: number[] }, dims: number, kept: DType): Float32Array {
  if (kept === 'f32') return read.rows;
  const round = kept === 'f16' ? (v: number) => f16BitsToF32(f32ToF16Bits(v)) : (v: number) => bf16BitsToF32(f32ToBf16Bits(v));
  const out = new Float32Array(read.rows.length);
  for (let i = 0; i < out.length; i++) {
    out[i] = round(read.rows[i]);
    if (!Number.isFinite(out[i])) {
      const row = read.picks[Math.floor(i / dims)];
      const f16 = kept === 'f16';
      throw new NonFiniteInputError(`row ${row} feature ${i % dims}: ${read.rows[i]} is beyond the range of ${f16 ? 'fp16 (±65504)' : 'bf16'}, the type a job in precision ${f16 ? 'fp16' : 'bf16'} keeps its rows in: use precision ${f16 ? 'bf16 or fp32' : 'fp32'}`, row);
    }
  }
  return out;
}

/** How many rows k-means++ runs on: 256 per centroid (at least 2^16), all rows when fewer, within the budget. */
export function kmeansPlusPlusSampleSize(rows: number, rowBytes: number, k: number, budgetBytes: number): number {
  const wanted = Math.max(256 * k, 1 << 16);
  return Math.min(rows, Math.max(k, Math.min(wanted, Math.floor(budgetBytes / rowBytes))));
}

async function kmeansPlusPlusSample(
  source: RowSource, k: number, seed: number, budget: number,
): Promise<{ rows: number; sample: Buffer; sampleRows?: Float64Array }> {
  const n = kmeansPlusPlusSampleSize(source.rows, source.rowBytes, k, budget);
  const sample = Buffer.allocUnsafe(n * source.rowBytes);
  if (n === source.rows) {
    // contiguous: plain chunked reads
    const chunk = Math.max(1, Math.floor((8 << 20) / source.rowBytes));
    for (let first = 0; first < n; first += chunk) {
      const c = Math.min(chunk, n - first);
      await source.read(first, c, sample.subarray(first * source.rowBytes, (first + c) * source.rowBytes));
    }
    return { rows: n, sample };
  }
  const idx = distinctIndicesSorted(new Rng(seed, STREAM_PP_SAMPLE), source.rows, n);
  await gatherRows(source, idx, sample);
  return { rows: n, sample, sampleRows: idx };
}

/** Rows by index (any order, distinct) as float32, packed in the order given. */
export async function readRowsAsF32(source: RowSource, rows: readonly number[]): Promise<Float32Array> {
  const order = rows.map((r, i) => [r, i] as const).sort((a, b) => a[0] - b[0]);
  const sorted = order.map((o) => o[0]);
  const raw = Buffer.allocUnsafe(rows.length * source.rowBytes);
  await gatherRows(source, sorted, raw);
  const d = source.dims;
  const out = new Float32Array(rows.length * d);
  for (let s = 0; s < order.length; s++) {
    const dst = order[s][1] * d;
    const off = s * source.rowBytes;
    if (source.dtype === 'f16') decodeF16(raw, off, d, out, dst);
    else for (let j = 0; j < d; j++) out[dst + j] = raw.readFloatLE(off + 4 * j);
  }
  return out;
}

export function checkGivenCentroids(c: Float32Array, k: number, dims: number): Float32Array {
  if (c.length !== k * dims) {
    throw new KmeansSpecError(`initial centroids have ${c.length} values; expected k × dims = ${k} × ${dims} = ${k * dims}`);
  }
  for (let i = 0; i < c.length; i++) {
    if (!Number.isFinite(c[i])) {
      throw new KmeansSpecError(`initial centroid ${Math.floor(i / dims)} has a non-finite value (${c[i]}) at dim ${i % dims}`);
    }
  }
  return c;
}

/** Cosine runs on unit vectors: normalize the initial centroids (a zero vector stays as it is). */
function prepareCentroids(c: Float32Array, dims: number, metric: Metric): Float32Array {
  if (metric !== 'cosine') return c;
  const out = Float32Array.from(c);
  for (let r = 0; r < out.length; r += dims) {
    let s = 0;
    for (let j = 0; j < dims; j++) s += out[r + j] * out[r + j];
    if (s > 0) {
      const inv = 1 / Math.sqrt(s);
      for (let j = 0; j < dims; j++) out[r + j] *= inv;
    }
  }
  return out;
}
