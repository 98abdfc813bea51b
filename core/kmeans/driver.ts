/**
 * Lloyd's algorithm over a streamed dataset, shared by `kmfleet fit` and the queue worker:
 *   init (or resume) → fit passes until a stopping rule holds → one assign pass for the final labels.
 * The engine does the arithmetic; this file decides what runs when, reports each iteration and hands out checkpoints.
 *
 * Iteration t is a fit pass with centroids C(t−1): labels L(t), inertia, reassigned = |L(t) ≠ L(t−1)|, then C(t).
 * A checkpoint after t holds C(t), C(t−1) and the history. Resuming runs an assign pass with C(t−1), which rebuilds
 * L(t) inside the engine, so iteration t+1 counts `reassigned` against the same labels as an uninterrupted run:
 * resumed runs are bitwise identical.
 */
import { CancelledError, type PassChain, type PassResult } from '../../native/index.js';
import type { RowSource } from '../dataset/row-source.js';
import { checkCheckpoint } from './checkpoint.js';
import { KmeansAbortedError, KmeansSpecError } from './errors.js';
import { applyInit, readInitRows, type InitOptions, type InitRows } from './init.js';
import { runPass } from './pass-runner.js';
import { stopReason } from './stopping.js';
import type { InitMethod, IterationReport, KmeansCheckpoint, KmeansEngine, KmeansLogger, KmeansResult, KmeansSpec, KmeansTimings, RunTiers, StopReason } from './types.js';

export interface RunKmeansOptions {
  engine: KmeansEngine;
  source: RowSource;
  spec: KmeansSpec;
  /** continue after this checkpoint instead of initializing */
  resume?: KmeansCheckpoint;
  /** after every iteration; awaited (a worker writes the checkpoint and progress here); a throw stops the run */
  onIteration?: (report: IterationReport, checkpoint: KmeansCheckpoint) => Promise<void> | void;
  /**
   * The final centroids (the result's), once known: before the last assign pass, which only labels rows. A worker
   * starts their upload here, beside that pass. Not awaited; a throw stops the run.
   */
  onFinalCentroids?: (centroids: Float32Array) => void;
  /**
   * Rows the engine was given ahead of the first pass (worker/dataset/resident-preload.ts): awaited just before that
   * pass, which starts its feeds at the rows it says the engine holds from row 0.
   */
  preload?: { finish(): Promise<number> };
  /**
   * After the run's first pass, with the rows the engine now holds from row 0 (PassResult.heldRows): at the source's
   * row count no later pass reads the source (a worker gives back a memory cache here). Not awaited.
   */
  onFirstPass?: (heldRows: number) => void;
  /** abort: the current pass stops at a chunk boundary and the run rejects with KmeansAbortedError */
  signal?: AbortSignal;
  log?: KmeansLogger;
  init?: InitOptions;
  /**
   * The init's rows, already being read (init.ts readInitRows, started before the engine opened); without it the run
   * reads them itself. Not used when resuming.
   */
  initRows?: Promise<InitRows>;
}

export function checkSpec(spec: KmeansSpec, rows: number): void {
  const bad = (msg: string): never => { throw new KmeansSpecError(msg); };
  if (!Number.isSafeInteger(spec.k) || spec.k < 1) bad(`k must be a positive integer, got ${spec.k}`);
  if (spec.k > rows) bad(`k = ${spec.k} is larger than the dataset's ${rows} rows`);
  if (spec.metric !== 'l2' && spec.metric !== 'cosine') bad(`metric must be l2 or cosine, got ${String(spec.metric)}`);
  if (!Number.isSafeInteger(spec.maxIter) || spec.maxIter < 0) bad(`maxIter must be a non-negative integer, got ${spec.maxIter}`);
  if (!(spec.tol >= 0) || !Number.isFinite(spec.tol)) bad(`tol must be a finite number ≥ 0, got ${spec.tol}`);
  if (!(spec.tolReassign >= 0 && spec.tolReassign <= 1)) bad(`tolReassign must be in [0, 1], got ${spec.tolReassign}`);
  if (!Number.isSafeInteger(spec.seed) || spec.seed < 0) bad(`seed must be a non-negative integer, got ${spec.seed}`);
}

export async function runKmeans(o: RunKmeansOptions): Promise<KmeansResult> {
  const { engine, source, spec } = o;
  checkSpec(spec, source.rows);
  const eo = engine.options;
  if (eo.rows !== source.rows || eo.dims !== source.dims || eo.k !== spec.k || eo.metric !== spec.metric) {
    throw new KmeansSpecError(
      `engine opened for ${eo.rows}×${eo.dims}, k=${eo.k}, ${eo.metric} but the run is ${source.rows}×${source.dims}, k=${spec.k}, ${spec.metric}`,
    );
  }
  const run = new LloydRun(o);
  const onAbort = () => engine.cancel();
  o.signal?.addEventListener('abort', onAbort);
  try {
    await run.start();
    await run.iterate();
    return await run.finish();
  } finally {
    o.signal?.removeEventListener('abort', onAbort);
  }
}

/** A fit pass started ahead (startFit): a failure waits until the caller awaits it. */
interface StartedFit {
  running: Promise<PassResult>;
  /** the centroids the pass starts from, read by the engine right behind its begin, when asked for */
  read: Promise<Float32Array> | undefined;
  started: number;
}

/** One run's state, in the order of its steps: start (resume or init), iterate, finish (the final assign pass). */
class LloydRun {
  private readonly engine: KmeansEngine;
  private readonly source: RowSource;
  private readonly spec: KmeansSpec;
  private readonly timings: KmeansTimings = { initMs: 0, resumeMs: 0, iterateMs: 0, assignMs: 0, readMs: 0 };
  private readonly readTime = { ms: 0 };
  /** handed out by an abort: the newest checkpoint */
  private lastCheckpoint: KmeansCheckpoint | undefined;
  private preload: RunKmeansOptions['preload'];
  private tiers: RunTiers | undefined;
  private history: IterationReport[] = [];
  private initMethod: InitMethod = 'given';
  /** the data's mean per-feature variance (sklearn's tol scale): asked of the passes until one (or the checkpoint) gave it */
  private dataVariance = NaN;
  private emptyReseeded = 0;
  private stop: StopReason | null = null;
  /** C(t−1), for the next checkpoint */
  private previous: Float32Array = new Float32Array(0);
  /**
   * On a device engine the passes overlap the driver's own work, and each fit pass carries the stopping rule, so that
   * the engine begins the next one itself when the rule says it follows: the device does not wait for the round trip
   * through JS between passes (the next beginPass takes that pass over; results are the same).
   */
  private readonly ahead: boolean;

  constructor(private readonly o: RunKmeansOptions) {
    this.engine = o.engine;
    this.source = o.source;
    this.spec = o.spec;
    this.lastCheckpoint = o.resume;
    this.preload = o.preload;
    this.ahead = o.engine.plan.backend !== 'cpu';
  }

  /** Resume from the checkpoint (rebuilding the labels of C(t−1)) or initialize the centroids. */
  async start(): Promise<void> {
    const { o, engine, source, spec } = this;
    const t0 = performance.now();
    if (o.resume) {
      const cp = o.resume;
      checkCheckpoint(cp, source.rows, source.dims, spec.k, spec.metric, spec.maxIter);
      this.history = cp.history.map((h) => ({ ...h }));
      this.initMethod = cp.initMethod;
      this.dataVariance = cp.dataVariance;
      this.emptyReseeded = this.history.reduce((s, h) => s + h.emptyReseeded, 0);
      this.stop = stopReason(this.history[this.history.length - 1], spec, this.dataVariance);
      if (this.stop === null) {
        // rebuild L(t): the labels of C(t−1)
        engine.setCentroids(cp.previousCentroids);
        this.noteVariance(await this.pass('assign', !Number.isFinite(this.dataVariance)));
      }
      engine.setCentroids(cp.centroids);
      this.previous = cp.centroids;
      this.timings.resumeMs = performance.now() - t0;
      o.log?.info({ iteration: cp.iteration, stop: this.stop }, 'resumed from checkpoint');
    } else {
      this.initMethod = await applyInit(engine, source.dims, spec, await (o.initRows ?? readInitRows(source, spec, o.init)));
      this.previous = engine.centroids();
      this.timings.initMs = performance.now() - t0;
      o.log?.info({ initMethod: this.initMethod, ms: Math.round(this.timings.initMs) }, 'initialized centroids');
      if (spec.maxIter === 0) this.stop = 'maxIter';
    }
  }

  /**
   * Fit passes until a stopping rule holds. On a device engine, iteration t+1's pass starts as soon as iteration t's
   * stopping rule says there is one: C(t) (its checkpoint) is read by the engine behind that pass's begin, and
   * onIteration (progress, checkpoint) runs beside the pass, so the device does not wait for either. The reports,
   * checkpoints and results are those of one pass after the other. On the CPU backend they run one after the other:
   * its pass takes every core (and its resident rows are computed in the begin's task), so the read would wait for
   * the pass and the bookkeeping beside it would only take cores from it.
   */
  async iterate(): Promise<void> {
    const tIter = performance.now();
    let next: StartedFit | undefined;
    while (this.stop === null) {
      const iteration = this.history.length + 1;
      const current = next ?? this.startFit(iteration, false);
      next = undefined;
      const report = this.report(iteration, await this.awaitFit(current), current.started);
      let centroids: Float32Array;
      if (this.stop === null && this.ahead) {
        next = this.startFit(iteration + 1, true);
        centroids = await this.centroidsRead(next);
      } else {
        centroids = this.engine.centroids();
      }
      const checkpoint = this.checkpoint(iteration, centroids);
      this.o.log?.debug?.({ ...report, stop: this.stop }, 'iteration');
      if (this.o.onIteration) {
        try {
          await this.o.onIteration(report, checkpoint);
        } catch (err) {
          if (next) await this.drop(next.running);
          throw err;
        }
      }
    }
    this.timings.iterateMs = performance.now() - tIter;
  }

  /** The final assign pass (labels, and distances when asked) with the result's centroids, and the result. */
  async finish(): Promise<KmeansResult> {
    const { o, engine, spec } = this;
    const ta = performance.now();
    // an assign pass leaves the centroids as they are: these are the result's
    const centroids = engine.centroids();
    o.onFinalCentroids?.(centroids);
    const final = await this.pass('assign', !Number.isFinite(this.dataVariance), spec.distances ?? false);
    this.timings.assignMs = performance.now() - ta;
    this.noteVariance(final);
    this.timings.readMs = this.readTime.ms;
    const stop = this.stop!;
    const result: KmeansResult = {
      centroids,
      iterations: this.history.length,
      converged: stop !== 'maxIter',
      stopReason: stop,
      history: this.history,
      inertia: final.inertia,
      counts: final.counts,
      emptyReseeded: this.emptyReseeded,
      initMethod: this.initMethod,
      dataVariance: this.dataVariance,
      timings: this.timings,
      tiers: this.tiers!,
    };
    if (o.resume) result.resumedFrom = o.resume.iteration;
    o.log?.info({ iterations: result.iterations, stopReason: stop, inertia: result.inertia }, 'k-means done');
    return result;
  }

  private checkAbort(): void {
    const { signal } = this.o;
    if (signal?.aborted) throw new KmeansAbortedError(this.lastCheckpoint, signal.reason);
  }

  private noteVariance(r: PassResult): void {
    if (Number.isFinite(r.dataVariance)) this.dataVariance = r.dataVariance;
  }

  /** Where this run's rows came from (KmeansResult.tiers), pass by pass. */
  private noteTiers(r: PassResult): void {
    const t = this.tiers;
    const total = t?.total ?? { resident: 0, host: 0, fed: 0 };
    this.tiers = {
      firstPass: t?.firstPass ?? r.rowsFrom,
      lastPass: r.rowsFrom,
      total: { resident: total.resident + r.rowsFrom.resident, host: total.host + r.rowsFrom.host, fed: total.fed + r.rowsFrom.fed },
      heldRowBytes: this.engine.plan.storedRowBytes,
    };
    if (r.hostTierWarning) this.tiers.hostTierWarning = r.hostTierWarning;
  }

  /** One pass; `variance`: whether the engine computes the data's variance in it (it does not change between passes). */
  private async pass(mode: 'fit' | 'assign', variance: boolean, distances = false, onBegin?: () => void, chain?: PassChain): Promise<PassResult> {
    const { o, engine, source } = this;
    this.checkAbort();
    let firstRow: number | undefined;
    if (this.preload) {
      firstRow = await this.preload.finish();
      this.preload = undefined;
      this.checkAbort();
    }
    try {
      const r = await runPass(engine, source, mode, { distances, dataVariance: variance, readTime: this.readTime, firstRow, onBegin, chain });
      if (!this.tiers) o.onFirstPass?.(r.heldRows);
      this.noteTiers(r);
      return r;
    } catch (err) {
      if (err instanceof CancelledError && o.signal?.aborted) throw new KmeansAbortedError(this.lastCheckpoint, o.signal.reason);
      throw err;
    }
  }

  /** Iteration `iteration`'s fit pass, started now; `readCentroids`: the engine reads C(iteration−1) behind its begin. */
  private startFit(iteration: number, readCentroids: boolean): StartedFit {
    const { spec, engine } = this;
    let read: Promise<Float32Array> | undefined;
    const started = performance.now();
    const variance = this.dataVariance;
    const chain = this.ahead ? { tol: spec.tol, tolReassign: spec.tolReassign, variance, passesLeft: spec.maxIter - iteration } : undefined;
    const running = this.pass('fit', !Number.isFinite(variance), false, readCentroids ? () => { read = engine.readCentroids(); } : undefined, chain);
    running.catch(() => {});
    read?.catch(() => {});
    return { running, read, started };
  }

  private async awaitFit(fit: StartedFit): Promise<PassResult> {
    try {
      return await fit.running;
    } catch (err) {
      // aborted while the previous iteration's bookkeeping ran: hand out the newest checkpoint
      if (err instanceof KmeansAbortedError) throw new KmeansAbortedError(this.lastCheckpoint, err.reason);
      throw err;
    }
  }

  /** The centroids a pass started ahead begins from: the previous iteration's result, read behind its begin. */
  private async centroidsRead(following: StartedFit): Promise<Float32Array> {
    if (!following.read) {
      await following.running; // it did not begin: it throws (aborted)
      throw new Error('k-means driver: a pass began without reading its centroids');
    }
    try {
      return await following.read;
    } catch (err) {
      await this.drop(following.running);
      throw err;
    }
  }

  /** Ends a pass started ahead whose iteration will not be used (the run is failing); never throws. */
  private async drop(p: Promise<unknown>): Promise<void> {
    this.engine.cancel();
    await p.catch(() => {});
  }

  /** The iteration's report, added to the history; the stopping rule decides whether another follows. */
  private report(iteration: number, r: PassResult, started: number): IterationReport {
    this.noteVariance(r);
    const report: IterationReport = {
      iteration,
      inertia: r.inertia,
      reassigned: r.reassigned,
      reassignedFraction: r.reassigned / this.source.rows,
      shift: r.shift,
      ms: performance.now() - started,
      emptyReseeded: r.emptyReseeded,
      settledFraction: r.rowsSettled / this.source.rows,
    };
    this.history.push(report);
    this.emptyReseeded += r.emptyReseeded;
    this.stop = stopReason(report, this.spec, this.dataVariance);
    return report;
  }

  /** The checkpoint after `iteration`: C(t) and C(t−1) with the history; the newest, handed out by an abort. */
  private checkpoint(iteration: number, centroids: Float32Array): KmeansCheckpoint {
    const { spec, source, engine } = this;
    const checkpoint: KmeansCheckpoint = {
      version: 1, iteration, k: spec.k, dims: source.dims, rows: source.rows, metric: spec.metric, initMethod: this.initMethod,
      centroids, previousCentroids: this.previous, history: this.history.map((h) => ({ ...h })), dataVariance: this.dataVariance,
      sumsPlan: { backend: engine.plan.backend, chunkRows: engine.plan.chunkRows },
    };
    this.previous = centroids;
    this.lastCheckpoint = checkpoint;
    return checkpoint;
  }
}
