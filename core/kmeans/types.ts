/** The k-means driver's contract: spec in, iteration reports and checkpoints out, a result at the end. */
import type { Engine, Metric } from '../../native/index.js';

/** What the driver needs of the native engine (native/index.ts's Engine satisfies it). */
export type KmeansEngine = Pick<
  Engine,
  'plan' | 'options' | 'buffer' | 'setCentroids' | 'centroids' | 'readCentroids' | 'initKmeansPlusPlus' | 'beginPass' | 'feed' | 'finishPass' | 'labels' | 'cancel'
> & Partial<Pick<Engine, 'feedFile'>>;

export type InitMethod = 'kmeans++' | 'random' | 'given';
export type StopReason = 'tol' | 'tolReassign' | 'maxIter';

export interface KmeansSpec {
  k: number;
  metric: Metric;
  /** 'kmeans++' | 'random' | the initial centroids, float32 K×D row-major */
  init: 'kmeans++' | 'random' | Float32Array;
  /** iterations at most (0: only the final assign pass with the initial centroids) */
  maxIter: number;
  /** sklearn's tol: stop when Σ‖Δc‖² ≤ tol × mean per-feature variance of the data */
  tol: number;
  /** kmcuda's tolerance: stop when reassigned / rows ≤ tolReassign (0: only when no label changed) */
  tolReassign: number;
  seed: number;
  /** ask the final assign pass for distances too (engine.distances()) */
  distances?: boolean;
}

export interface IterationReport {
  /** 1-based */
  iteration: number;
  /** Σ distance of the rows to their centroid before this iteration's update */
  inertia: number;
  reassigned: number;
  reassignedFraction: number;
  /** Σ_c ‖c_new − c_old‖² */
  shift: number;
  /** wall milliseconds of the iteration (reads included) */
  ms: number;
  emptyReseeded: number;
  /**
   * the share of rows whose bounds proved their label unchanged, so that none of their distances was computed (0 where
   * the backend keeps no bounds; absent in iterations a checkpoint of an older worker recorded). Like ms, it depends
   * on how the run went (a resumed engine starts without bounds), never on the results
   */
  settledFraction?: number;
}

/**
 * Everything needed to continue a run after iteration `iteration` with bitwise-identical results: the centroids after
 * it, the centroids before it (to rebuild the labels that the next iteration's `reassigned` compares against) and the
 * history so far.
 */
export interface KmeansCheckpoint {
  version: 1;
  iteration: number;
  k: number;
  dims: number;
  rows: number;
  metric: Metric;
  initMethod: InitMethod;
  /** float32 K×D after iteration `iteration` */
  centroids: Float32Array;
  /** float32 K×D before iteration `iteration` (the initial centroids when iteration = 1) */
  previousCentroids: Float32Array;
  history: IterationReport[];
  /** mean per-feature variance of the data, as the engine computed it */
  dataVariance: number;
  /**
   * The engine plan the sums were added under (absent in checkpoints of older workers). Some CUDA results' last bits
   * depend on its chunk rows (docs/DESIGN.md, Numerics): a resume opens its engine with the same chunkRows
   * (worker/job-engine.ts) so the result stays bitwise equal to an uninterrupted run.
   */
  sumsPlan?: SumsPlan;
}

/** What decides the bits of a backend's per-cluster sums, besides the data and the centroids. */
export interface SumsPlan {
  backend: 'cpu' | 'cuda';
  chunkRows: number;
}

export interface KmeansTimings {
  initMs: number;
  /** the labels-rebuilding assign pass of a resumed run */
  resumeMs: number;
  iterateMs: number;
  /** the final assign pass */
  assignMs: number;
  /** time spent inside source.read (overlaps with compute) */
  readMs: number;
}

export interface KmeansResult {
  centroids: Float32Array;
  /** iterations done in total (resumed ones included) */
  iterations: number;
  converged: boolean;
  stopReason: StopReason;
  history: IterationReport[];
  /** inertia of the final assignment (the final centroids) */
  inertia: number;
  /** rows per cluster in the final assignment */
  counts: Float64Array;
  /** empty clusters re-seeded over all iterations */
  emptyReseeded: number;
  initMethod: InitMethod;
  /** the iteration a resumed run started after, absent for a fresh run */
  resumedFrom?: number;
  dataVariance: number;
  timings: KmeansTimings;
  /** where the rows of the run's passes came from (the engine's tiers): the first pass, and the last (the final one) */
  tiers: RunTiers;
}

/** Rows of one pass by where they came from (native PassResult.rowsFrom). */
export interface PassRows {
  /** the backend's resident rows (device memory on CUDA) */
  resident: number;
  /** the engine's host tier */
  host: number;
  /** fed from the row source */
  fed: number;
}

export interface RunTiers {
  firstPass: PassRows;
  lastPass: PassRows;
  /** summed over every pass of the run */
  total: PassRows;
  /** bytes of a resident or host-tier row: the source's, or half of them where the engine keeps f32 rows as fp16/bf16 */
  heldRowBytes: number;
  /** the engine's host tier is not what was planned (not page-locked, or short of memory) */
  hostTierWarning?: string;
}

/** pino-compatible subset */
export interface KmeansLogger {
  info(obj: object, msg?: string): void;
  debug?(obj: object, msg?: string): void;
}
