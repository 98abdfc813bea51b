/**
 * The one TypeScript module that wraps the native addon (DESIGN.md: worker → native through one module).
 *
 * CONTRACT (fixed by the lead; the native helper implements it, everyone else codes against it):
 *
 *   const engine = await Engine.open({ rows, dims, k, metric, dtype, backend, precision, chunkRows, threads, memoryBudget });
 *   engine.plan                      -> what the planner chose (backend, device, chunkRows, buffers, residentRows, precision)
 *   engine.buffer(i)                 -> Buffer over engine-owned host memory (pinned on CUDA), chunkRows*dims*bytes long
 *   engine.setCentroids(f32 K×D)     -> replace the current centroids (validated: shape, finiteness)
 *   await engine.initKmeansPlusPlus(sample, sampleRows, seed)  -> greedy k-means++ (2+ln k trials) over the given rows
 *
 *   A pass visits every row once, in row order:
 *     engine.beginPass('fit' | 'assign', { distances })
 *     for rows not resident (firstRow >= plan.residentRows on passes after the first):
 *        fill engine.buffer(b) with rows [firstRow, firstRow+count), then  await engine.feed(b, firstRow, count)
 *        (feed resolves when buffer b may be refilled; at most plan.buffers feeds may be in flight)
 *     const r = await engine.finishPass()
 *   Resident rows (the first plan.residentRows) are kept by the engine the first time they are fed and are
 *   processed by the engine itself, before the streamed rows, in every later pass.
 *
 *   fit pass:    assign with the current centroids, accumulate, then the centroids become the new means
 *                (empty clusters re-seeded with the farthest rows). Result: inertia (with the old centroids),
 *                reassigned (labels that differ from the previous pass; = rows on the first pass), shift (Σ‖Δc‖²),
 *                emptyReseeded, counts.
 *   assign pass: labels (and distances when asked) for the current centroids; centroids unchanged.
 *   Both passes also compute the data's per-feature variance (needed for sklearn's tol) when they saw every row.
 *
 *   engine.labels(firstRow, count)    -> Int32Array copy of labels from the last pass
 *   engine.distances(firstRow, count) -> Float32Array (assign pass with distances only): squared L2, or cosine distance 1 − cos
 *   engine.centroids()                -> Float32Array K×D copy
 *   engine.cancel()                   -> the pending/next feed or finishPass rejects with CancelledError at a chunk boundary
 *   engine.close()                    -> frees native memory (idempotent); the engine is unusable afterwards
 *
 *   Errors are instances of the classes below (never a crash, never a NaN centroid).
 */

export type Metric = 'l2' | 'cosine';
export type DType = 'f32' | 'f16' | 'bf16';
export type Precision = 'auto' | 'fp32' | 'tf32' | 'bf16' | 'fp16';
export type BackendChoice = 'auto' | 'cpu' | 'cuda';
export type PassMode = 'fit' | 'assign';

export interface EngineOptions {
  rows: number;
  dims: number;
  k: number;
  metric: Metric;
  dtype: DType;
  backend?: BackendChoice;
  precision?: Precision;
  /** rows per host buffer; the planner picks when absent */
  chunkRows?: number;
  /** host buffers in flight (default 2 on cpu, 3 on cuda) */
  buffers?: number;
  /** CPU threads (default: all cores) */
  threads?: number;
  /** bytes of memory for resident rows (device memory on CUDA, host memory on CPU); default: planner */
  memoryBudget?: number;
  /** CUDA device ordinal */
  device?: number;
}

export interface EnginePlan {
  backend: 'cpu' | 'cuda';
  /** human-readable device, e.g. "NVIDIA H200" or "cpu x86_64 avx512 (2 threads)" */
  device: string;
  precision: Exclude<Precision, 'auto'>;
  chunkRows: number;
  buffers: number;
  residentRows: number;
  /** bytes of one row in the host buffers */
  rowBytes: number;
}

export interface PassResult {
  mode: PassMode;
  /** Σ of the rows' distances to their assigned centroid (before the update, on a fit pass) */
  inertia: number;
  /** rows whose label differs from the previous pass (all rows on the first pass) */
  reassigned: number;
  /** Σ_c ‖c_new − c_old‖² (fit passes; 0 on assign passes) */
  shift: number;
  /** empty clusters re-seeded with the farthest rows (fit passes) */
  emptyReseeded: number;
  /** rows per cluster */
  counts: Float64Array;
  /** mean over features of the per-feature variance of the data (NaN if the pass did not see every row) */
  dataVariance: number;
  /** wall milliseconds of the pass, measured in native code */
  ms: number;
}

export interface GpuInfo {
  available: boolean;
  /** why not, when unavailable: "built without CUDA", "no CUDA driver", "no device" */
  reason?: string;
  devices: { ordinal: number; name: string; computeCapability: string; totalMemory: number; freeMemory: number }[];
}

export class EngineError extends Error {
  constructor(message: string, readonly code: string) {
    super(message);
    this.name = new.target.name;
  }
}
export class InvalidArgumentError extends EngineError {
  constructor(message: string) { super(message, 'INVALID_ARGUMENT'); }
}
export class OutOfMemoryError extends EngineError {
  constructor(message: string) { super(message, 'OUT_OF_MEMORY'); }
}
export class NonFiniteInputError extends EngineError {
  constructor(message: string, readonly row: number) { super(message, 'NON_FINITE_INPUT'); }
}
export class DeviceError extends EngineError {
  constructor(message: string) { super(message, 'DEVICE_ERROR'); }
}
export class CancelledError extends EngineError {
  constructor(message = 'cancelled') { super(message, 'CANCELLED'); }
}

/** Query GPUs without creating an engine (never throws when there is no GPU). */
export declare function gpuInfo(): GpuInfo;

export declare class Engine {
  static open(options: EngineOptions): Promise<Engine>;
  readonly plan: EnginePlan;
  readonly options: Readonly<Required<Pick<EngineOptions, 'rows' | 'dims' | 'k' | 'metric' | 'dtype'>>>;
  buffer(index: number): Buffer;
  setCentroids(centroids: Float32Array): void;
  centroids(): Float32Array;
  initKmeansPlusPlus(sample: Buffer | Float32Array, sampleRows: number, seed: number): Promise<void>;
  beginPass(mode: PassMode, options?: { distances?: boolean }): void;
  feed(buffer: number, firstRow: number, rowCount: number): Promise<void>;
  finishPass(): Promise<PassResult>;
  labels(firstRow?: number, count?: number): Int32Array;
  distances(firstRow?: number, count?: number): Float32Array;
  cancel(): void;
  close(): void;
}
