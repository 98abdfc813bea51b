/**
 * The one TypeScript module that wraps the native addon (DESIGN.md: worker → native through one module).
 *
 * The contract (the worker, the CLI and the tests code against it; native/src implements it):
 *
 *   const engine = await Engine.open({ rows, dims, k, metric, dtype, backend, precision, chunkRows, threads, memoryBudget,
 *                                      hostMemoryBudget, device, update, bounds, cuda });
 *                                      (update, bounds, cuda: the paths that tests and measurements compare)
 *   engine.plan                      -> what the planner chose (backend, device, chunkRows, buffers, residentRows,
 *                                       hostRows, precision)
 *   engine.buffer(i)                 -> Buffer over engine-owned host memory (pinned on CUDA), chunkRows*dims*bytes long
 *   engine.setCentroids(f32 K×D)     -> replace the current centroids (validated: shape, finiteness)
 *   await engine.initKmeansPlusPlus(sample, sampleRows, seed)  -> greedy k-means++ (2+ln k trials) over the given rows
 *
 *   A pass visits every row once, in row order:
 *     engine.beginPass('fit' | 'assign', { distances, dataVariance, firstRow })
 *     for rows the engine does not hold (from the previous PassResult.heldRows on; 0 on the first pass):
 *        fill engine.buffer(b) with rows [firstRow, firstRow+count), then  await engine.feed(b, firstRow, count)
 *        (feed resolves when buffer b may be refilled; at most plan.buffers feeds may be in flight)
 *        or, for rows that lie in a local file:  await engine.feedFile(fd, byteOffset, firstRow, count)
 *     const r = await engine.finishPass()
 *   Held rows are kept by the engine the first time they are fed and processed by the engine itself, before the fed
 *   rows, in every later pass: the first plan.residentRows by the backend (resident: device memory on CUDA), the
 *   next plan.hostRows in the engine's host tier (host memory, page-locked on CUDA, in whole chunks of plan.chunkRows
 *   from plan.residentRows: a feed off that grid is processed but not kept). PassResult.heldRows says where the held
 *   rows end after a pass, and rowsFrom where the pass's rows came from.
 *
 *   fit pass:    assign with the current centroids, accumulate, then the centroids become the new means
 *                (empty clusters re-seeded with the farthest rows). Result: inertia (with the old centroids),
 *                reassigned (labels that differ from the previous pass; = rows on the first pass), shift (Σ‖Δc‖²),
 *                emptyReseeded, counts.
 *   assign pass: labels (and distances when asked) for the current centroids; centroids unchanged.
 *   Both passes also compute the data's per-feature variance (needed for sklearn's tol) when they saw every row,
 *   unless beginPass was told { dataVariance: false } (then NaN): it does not change between passes, so a caller that
 *   has it need not pay for it again (on the GPU it is most of the update's kernels at large K×D).
 *
 *   engine.labels(firstRow, count)    -> Int32Array copy of labels from the last pass
 *   engine.distances(firstRow, count) -> Float32Array (assign pass with distances only): squared L2, or cosine distance 1 − cos
 *   engine.centroids()                -> Float32Array K×D copy
 *   await engine.readCentroids()      -> the same, read by the engine thread behind the work queued before it
 *   engine.cancel()                   -> the pending/next feed or finishPass rejects with CancelledError at a chunk boundary
 *   engine.close()                    -> frees native memory (idempotent); the engine is unusable afterwards
 *
 *   Errors are instances of the classes below (never a crash, never a NaN centroid).
 *
 * Notes on the contract:
 *   - The addon is build/Release/kmfleet_native.node under the package root (found by walking up from this file
 *     to the package.json named "kmfleet": works from native/ and from dist/native/); env KMFLEET_ADDON (an
 *     absolute path) overrides it, e.g. build-cpu/Release/kmfleet_native.node. Loaded on first use.
 *   - `counts` in a fit PassResult are the rows ASSIGNED to each cluster in that pass (consistent with labels and
 *     inertia), before the re-seeding of empty clusters moved a row into them.
 *   - A CPU engine always computes exact fp32 (plan.precision 'fp32'), whatever precision was asked.
 *   - initKmeansPlusPlus: a Buffer holds rows in the engine's dtype, a Float32Array rows in f32.
 *   - Held rows: on a pass after the first, feeds starting at row 0 are also accepted (the engine then ignores its
 *     held copies for that pass); feeds starting at the last PassResult.heldRows are the normal case. The resident
 *     copy is complete once a pass has fed rows [0, plan.residentRows) and finished; until then (e.g. the first pass
 *     was cancelled) every pass must start at row 0. The host tier's rows count as held only after a complete
 *     resident copy. Where the rows are held never changes a bit of the results.
 *   - beginPass while a pass is open (cancelled, failed or abandoned) replaces it. After an error other than an
 *     out-of-sequence feed, later feeds and finishPass of that pass reject with the same error.
 *   - beginPass `firstRow`: where this pass's feeds will start. At the held rows' end the
 *     engine processes its held rows right away instead of at the first feed or finishPass, so the device works
 *     while the caller does what comes before those (e.g. readCentroids); at 0, the caller streams every row. Left out,
 *     the first feed tells, as above.
 *   - beginPass `chain` (fit passes): the caller's stopping rule; when it says another iteration follows the engine
 *     begins that pass itself and PassResult.chained says so. A matching beginPass('fit', { dataVariance: false,
 *     firstRow }) takes it over (no new begin); anything else abandons it. Results are those of passes begun by JS.
 *   - readCentroids() is queued on the engine thread like a feed: called between beginPass and finishPass it
 *     resolves with the centroids that pass started from (the fit update comes in finishPass's work), copied while
 *     the pass's device work runs. Once finishPass was called it rejects (InvalidArgumentError) until that settles.
 *     The job's driver reads each iteration's centroids (its checkpoint) this way, beside the next pass.
 *   - close(): pending Promises reject with CancelledError; Buffers from buffer(i) are detached (length 0).
 *   - Rows loaded ahead of the first pass (engine.loadsRows, engine.loadRows(rows, firstRow, rowCount)): a worker hands
 *     the engine rows as its download delivers them, in any order, and the engine keeps those of [0, plan.residentRows)
 *     as resident rows (converted as a pass would) without a pass: no labels, nothing accumulated, nothing reported.
 *     Each load resolves with the rows now held contiguously from row 0 (H); the next pass then starts its feeds at H
 *     (the engine processes [0, H) itself first) — or at row 0, as always. Results are bit for bit those of a pass
 *     fed from row 0. A row that fails the input checks (non-finite, cosine zero norm) is not kept and ends the
 *     load's rows there without an error: the pass that streams it reports it exactly as without a load. Not while a
 *     pass is open. cancel() also rejects the loads queued before it (CancelledError); a load that rejects kept
 *     nothing, so the last resolved value stays exact. The caller must leave the rows unchanged until the Promise
 *     settles. loadsRows is false where the backend cannot (CUDA for now): feed every row in the first pass there.
 *   - Extra export: loadAddon() (the raw addon, for diagnostics).
 *   - Env: KMFLEET_CPU_ISA=generic|avx2|avx512|avx512bf16 caps the CPU kernels (read when an engine opens); KMFLEET_DEBUG=1
 *     prints per-pass notes of the CPU backend (rows rechecked in fp64) on stderr.
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
  /** host buffers in flight (default 2 on cpu; 3 on cuda, pinned, at most one per chunk of the dataset) */
  buffers?: number;
  /** CPU threads (default: all cores) */
  threads?: number;
  /** bytes of memory for resident rows (device memory on CUDA, host memory on CPU); default: planner */
  memoryBudget?: number;
  /**
   * CUDA: bytes of device memory the engine may take in all — centroids, sums, chunk slots and resident rows — for a
   * job on a shared device (the rows that do not fit go to the host tier). A cap too small for the centroids and one
   * chunk fails at open (InvalidArgumentError) with the smallest cap that works. Default: the device's free memory
   * less a headroom. The CPU backend ignores it (memoryBudget caps its resident rows).
   */
  deviceMemory?: number;
  /**
   * bytes of host memory for the host tier: the rows after the resident ones, kept by the engine (page-locked on CUDA)
   * the first time a pass feeds them, so later passes need only the rows past them. 0: none. Default: what the host
   * (or its cgroup) has available, less a fifth of it and at least 2 GiB
   */
  hostMemoryBudget?: number;
  /** CUDA device ordinal */
  device?: number;
  /**
   * CUDA: the devices of one job across several GPUs, its rows split into one share per device (each kept on its
   * device and in host memory), the same bits as on one GPU; overrides device. Needs k × dims ≤ 2^26.
   */
  devices?: number[];
  /**
   * where a fit pass's centroid update runs: 'auto' (where the backend keeps the pass's sums: the device on CUDA) or
   * 'host' (the same bits; tests compare the two)
   */
  update?: 'auto' | 'host';
  /**
   * rows whose bounds prove their label unchanged skip the distance work: 'auto' (where the backend keeps bounds: the
   * CPU's; CUDA's resident rows in fp32, fp16 and bf16, which it labels exactly) or 'off'; the same bits either way (tests and benchmarks compare the two)
   */
  bounds?: 'auto' | 'off';
  /** settings of the CUDA backend for tests and measurements (ignored by the CPU backend); the defaults are production's */
  cuda?: CudaOptions;
}

/**
 * Settings of the CUDA backend. Every path they pick gives the same labels and, where the docs say so, the same bits:
 * they exist so that tests can compare paths and a benchmark can time them, not to trade accuracy for speed.
 */
export interface CudaOptions {
  /**
   * the assignment kernel: 'auto' (the Hopper wgmma kernel where the build and the device have it and the padded
   * dims are ≤ 256, else the portable mma.sync one) or 'portable' (the portable one everywhere; the plan's device says
   * which runs)
   */
  assignKernel?: 'auto' | 'portable';
  /**
   * bytes of shared memory per block the portable kernel plans its layout for, when below the device's opt-in limit:
   * 166912 runs an A100's layout on a larger GPU, 101376 an A10G's or L4's (default: the device's)
   */
  sharedMemoryLimit?: number;
  /** exact precisions (fp32, fp16, bf16): screen the rows with one product first where the screen policy expects it to pay ('auto') or never ('off') */
  exactScreen?: 'auto' | 'off';
  /**
   * exact precisions on the Hopper kernel: the screen's keys relative to each resident row's best of the previous pass —
   * 'auto' (the policy decides), 'off', or 'always' (every pass once a screen wrote them)
   */
  relativeKeys?: 'auto' | 'off' | 'always';
  /** device slots for streamed chunks, 2–16 (default: the planner's, 2 when every row stays resident, else 4) */
  slots?: number;
  /** resident steps queued ahead of streamed chunks in a partly resident pass, ≥ 1 (default 2) */
  residentAhead?: number;
}

export interface EnginePlan {
  backend: 'cpu' | 'cuda';
  /** human-readable device, e.g. "NVIDIA H200" or "cpu x86_64 avx512 (2 threads)" */
  device: string;
  precision: Exclude<Precision, 'auto'>;
  chunkRows: number;
  buffers: number;
  /** rows [0, residentRows) are kept by the backend (device memory on CUDA) once fed */
  residentRows: number;
  /** rows [residentRows, residentRows + hostRows) are kept by the engine in host memory once fed (the host tier) */
  hostRows: number;
  /** bytes of one row in the host buffers */
  rowBytes: number;
  /**
   * bytes of one row as the engine keeps and streams it (resident rows, host tier): rowBytes, or half of it in an
   * fp16/bf16 job over f32 rows, which the engine rounds to that type as it takes them
   */
  storedRowBytes: number;
  /** the type of those rows: the dataset's, or fp16/bf16 for such a job over f32 rows */
  keptDtype: DType;
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
  /**
   * Fit passes: where the centroid update ran — 'device' when the backend computed it where its totals are (CUDA,
   * every cluster non-empty; the same bits as 'host'), else 'host'. Assign passes: 'none'.
   */
  update: 'host' | 'device' | 'none';
  /**
   * The engine began the next fit pass itself (beginPass `chain` said another iteration follows): the next
   * beginPass('fit', { dataVariance: false, firstRow }) with this pass's resident rows as firstRow takes it over.
   */
  chained: boolean;
  /** this pass is one the engine began itself (the previous result's `chained`), taken over by the caller */
  begunByEngine: boolean;
  /** where this pass's rows came from: the backend's resident rows, the engine's host tier, the caller's feeds */
  rowsFrom: { resident: number; host: number; fed: number };
  /** rows whose label the backend's bounds proved unchanged, so that no distance of theirs was computed */
  rowsSettled: number;
  /**
   * the labels that came to the host from where the backend computed them: every row's, or only the changed rows'
   * (CUDA, every row resident and few changed: the others are the previous pass's, already in the engine's array)
   */
  labelsDown: 'every' | 'changed';
  /** rows the engine holds from row 0 after this pass (resident, then host tier): where the next pass's feeds start */
  heldRows: number;
  /** of heldRows, those in the host tier */
  hostRowsHeld: number;
  /** why the host tier is not what the plan says (not page-locked, or it ran out of memory), when it is not */
  hostTierWarning?: string;
}

/** The caller's stopping rule for chained fit passes (see BeginPassOptions.chain and core/kmeans/stopping.ts). */
export interface PassChain {
  tol: number;
  tolReassign: number;
  /** the data's variance for `tol`; NaN: this pass's own (it must compute it) */
  variance: number;
  /** fit passes the caller may still run after this one (maxIter − this pass's iteration) */
  passesLeft: number;
}

export interface GpuInfo {
  available: boolean;
  /** why not, when unavailable: "built without CUDA", "no CUDA driver", "no device" */
  reason?: string;
  devices: { ordinal: number; name: string; computeCapability: string; totalMemory: number; freeMemory: number }[];
}

import { KmfleetError } from '../errors/index.js';

/** What the engine refused or failed at; `code` is the addon's own (native/src: the thrown error's code). */
export abstract class EngineError extends KmfleetError {
  abstract override readonly code: 'INVALID_ARGUMENT' | 'OUT_OF_MEMORY' | 'NON_FINITE_INPUT' | 'DEVICE_ERROR' | 'CANCELLED';
}
/** A bad option, shape, centroid or call (out of order, on a closed engine); not the SDK's ArgumentError. */
export class InvalidArgumentError extends EngineError {
  readonly code = 'INVALID_ARGUMENT';
}
export class OutOfMemoryError extends EngineError {
  readonly code = 'OUT_OF_MEMORY';
}
export class NonFiniteInputError extends EngineError {
  readonly code = 'NON_FINITE_INPUT';
  constructor(message: string, readonly row: number) { super(message); }
}
export class DeviceError extends EngineError {
  readonly code = 'DEVICE_ERROR';
}
export class CancelledError extends EngineError {
  readonly code = 'CANCELLED';
  constructor(message = 'cancelled') { super(message); }
}

// ---- implementation -----------------------------------------------------------------------------------------

import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface BeginPassOptions {
  /** distances of the rows to their centroids (assign passes only) */
  distances?: boolean;
  /** compute the data's per-feature variance (default true; PassResult.dataVariance NaN when false) */
  dataVariance?: boolean;
  /** where this pass's feeds start: plan.residentRows (the engine processes its resident rows at once) or 0 */
  firstRow?: number;
  /**
   * Fit passes: the caller's stopping rule. When this pass saw every row and the rule says another iteration follows
   * (reassigned/rows > tolReassign, shift > tol × variance, passesLeft > 0), the engine begins that fit pass at once —
   * feeds from its resident rows' end, no data variance, the same rule with one pass fewer — and the result says
   * `chained`. The caller's next matching beginPass takes it over; any other call (another beginPass, setCentroids,
   * a load, init, cancel) abandons it. The device then need not wait for the round trip through JS between passes.
   */
  chain?: PassChain;
}

interface NativePassResult extends Omit<PassResult, 'mode'> { mode: PassMode }

interface NativeEngine {
  readonly plan: EnginePlan;
  buffer(index: number): Buffer;
  setCentroids(centroids: Float32Array): void;
  centroids(): Float32Array;
  readCentroids(): Promise<Float32Array>;
  initKmeansPlusPlus(sample: Uint8Array | Float32Array, sampleRows: number, seed: number): Promise<void>;
  readonly loadsRows: boolean;
  loadRows(rows: Uint8Array, firstRow: number, rowCount: number): Promise<number>;
  beginPass(mode: PassMode, options?: BeginPassOptions): void;
  feed(buffer: number, firstRow: number, rowCount: number): Promise<void>;
  feedFile(fd: number, byteOffset: number, firstRow: number, rowCount: number): Promise<void>;
  finishPass(): Promise<NativePassResult>;
  labels(firstRow?: number, count?: number): Int32Array;
  distances(firstRow?: number, count?: number): Float32Array;
  cancel(): void;
  close(): void;
}

interface NativeAddon {
  gpuInfo(): GpuInfo;
  hostMemory(): HostMemory;
  open(options: EngineOptions): Promise<NativeEngine>;
}

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'kmfleet') return dir;
      } catch {
        // not ours; keep walking
      }
    }
    const up = dirname(dir);
    if (up === dir) throw new Error('kmfleet: package root (package.json named "kmfleet") not found above ' + fileURLToPath(import.meta.url));
    dir = up;
  }
}

let addon: NativeAddon | undefined;

/** The raw addon (loaded once): build/Release/kmfleet_native.node, or env KMFLEET_ADDON. */
export function loadAddon(): NativeAddon {
  if (addon) return addon;
  const path = process.env.KMFLEET_ADDON || join(packageRoot(), 'build', 'Release', 'kmfleet_native.node');
  if (!existsSync(path)) {
    throw new Error(`kmfleet: native addon not found at ${path}: run \`npm run build:native\` (or set KMFLEET_ADDON)`);
  }
  addon = createRequire(import.meta.url)(path) as NativeAddon;
  return addon;
}

/** Native errors carry a `code` (and `row`): turn them into the classes above. */
function typed(e: unknown): unknown {
  if (e instanceof EngineError || !(e instanceof Error)) return e;
  const { code, row } = e as Error & { code?: unknown; row?: unknown };
  switch (code) {
    case 'INVALID_ARGUMENT': return new InvalidArgumentError(e.message);
    case 'OUT_OF_MEMORY': return new OutOfMemoryError(e.message);
    case 'NON_FINITE_INPUT': return new NonFiniteInputError(e.message, typeof row === 'number' ? row : -1);
    case 'DEVICE_ERROR': return new DeviceError(e.message);
    case 'CANCELLED': return new CancelledError(e.message);
    default: return e;
  }
}

function sync<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw typed(e);
  }
}

async function later<T>(p: () => Promise<T>): Promise<T> {
  try {
    return await p();
  } catch (e) {
    throw typed(e);
  }
}

/** Host memory as the engine plans its host tier (native/src/host_memory.h). */
export interface HostMemory {
  /** bytes this process could still allocate: MemAvailable, or what the cgroup's limit leaves if less; -1 unknown */
  available: number;
  /** the host tier's budget when EngineOptions.hostMemoryBudget is not given */
  hostTierDefault: number;
}

export function hostMemory(): HostMemory {
  return loadAddon().hostMemory();
}

/** Query GPUs without creating an engine (never throws when there is no GPU). */
export function gpuInfo(): GpuInfo {
  return loadAddon().gpuInfo();
}

export class Engine {
  readonly plan: EnginePlan;
  readonly options: Readonly<Required<Pick<EngineOptions, 'rows' | 'dims' | 'k' | 'metric' | 'dtype'>>>;

  private constructor(private readonly native: NativeEngine, options: EngineOptions) {
    this.plan = Object.freeze({ ...native.plan });
    this.options = Object.freeze({ rows: options.rows, dims: options.dims, k: options.k, metric: options.metric, dtype: options.dtype });
  }

  static async open(options: EngineOptions): Promise<Engine> {
    if (options.backend === 'cuda') {
      // Asked for CUDA where no GPU runs: say so, not what cudaGetDeviceCount says ("driver version is insufficient")
      const gpu = loadAddon().gpuInfo();
      if (!gpu.available && gpu.reason !== 'built without CUDA') {
        throw new DeviceError(`backend 'cuda' requested but no GPU was found (${gpu.reason ?? 'no device'})`);
      }
    }
    const native = await later(() => loadAddon().open(options));
    return new Engine(native, options);
  }

  buffer(index: number): Buffer {
    return sync(() => this.native.buffer(index));
  }

  setCentroids(centroids: Float32Array): void {
    sync(() => this.native.setCentroids(centroids));
  }

  centroids(): Float32Array {
    return sync(() => this.native.centroids());
  }

  /** The centroids, read on the engine thread behind the work queued before (see the notes above). */
  readCentroids(): Promise<Float32Array> {
    return later(() => this.native.readCentroids());
  }

  initKmeansPlusPlus(sample: Buffer | Float32Array, sampleRows: number, seed: number): Promise<void> {
    return later(() => this.native.initKmeansPlusPlus(sample, sampleRows, seed));
  }

  /** whether loadRows is supported (the CPU backend); false once closed */
  get loadsRows(): boolean {
    return this.native.loadsRows;
  }

  /**
   * Keep rows [firstRow, firstRow + rowCount) (bytes in the engine dtype, from `rows`) as resident rows ahead of a
   * pass; resolves with the rows held from row 0, where the next pass's feeds may start. See the notes above.
   */
  async loadRows(rows: Uint8Array, firstRow: number, rowCount: number): Promise<number> {
    try {
      return await this.native.loadRows(rows, firstRow, rowCount);
    } catch (e) {
      throw typed(e);
    }
  }

  beginPass(mode: PassMode, options?: BeginPassOptions): void {
    sync(() => this.native.beginPass(mode, options));
  }

  feed(buffer: number, firstRow: number, rowCount: number): Promise<void> {
    return later(() => this.native.feed(buffer, firstRow, rowCount));
  }

  /**
   * A feed that the engine reads itself: rows [firstRow, firstRow + rowCount), in the engine's dtype, lie one after
   * another from byte `byteOffset` of the open file `fd` (RowSource.fileRows). Its threads read them in ~1 MiB pieces,
   * many at once, and on CUDA each piece goes to the device through a small page-locked buffer as it lands, so the rows
   * cross host memory once. Same order rules and results as feed; resolves once the rows were taken. The file must
   * stay open until then.
   */
  feedFile(fd: number, byteOffset: number, firstRow: number, rowCount: number): Promise<void> {
    return later(() => this.native.feedFile(fd, byteOffset, firstRow, rowCount));
  }

  finishPass(): Promise<PassResult> {
    return later(() => this.native.finishPass());
  }

  labels(firstRow?: number, count?: number): Int32Array {
    return sync(() => this.native.labels(firstRow, count));
  }

  distances(firstRow?: number, count?: number): Float32Array {
    return sync(() => this.native.distances(firstRow, count));
  }

  cancel(): void {
    this.native.cancel();
  }

  close(): void {
    this.native.close();
  }
}
