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
  const { engine, source, spec, log } = o;
  checkSpec(spec, source.rows);
  const eo = engine.options;
  if (eo.rows !== source.rows || eo.dims !== source.dims || eo.k !== spec.k || eo.metric !== spec.metric) {
    throw new KmeansSpecError(
      `engine opened for ${eo.rows}×${eo.dims}, k=${eo.k}, ${eo.metric} but the run is ${source.rows}×${source.dims}, k=${spec.k}, ${spec.metric}`,
    );
  }
  const timings: KmeansTimings = { initMs: 0, resumeMs: 0, iterateMs: 0, assignMs: 0, readMs: 0 };
  const readTime = { ms: 0 };
  let lastCheckpoint = o.resume;
  const onAbort = () => engine.cancel();
  o.signal?.addEventListener('abort', onAbort);
  const checkAbort = () => {
    if (o.signal?.aborted) throw new KmeansAbortedError(lastCheckpoint, o.signal.reason);
  };
  let preload = o.preload;
  let tiers: RunTiers | undefined;
  const noteTiers = (r: PassResult) => {
    const total = tiers?.total ?? { resident: 0, host: 0, fed: 0 };
    tiers = {
      firstPass: tiers?.firstPass ?? r.rowsFrom,
      lastPass: r.rowsFrom,
      total: { resident: total.resident + r.rowsFrom.resident, host: total.host + r.rowsFrom.host, fed: total.fed + r.rowsFrom.fed },
    };
    if (r.hostTierWarning) tiers.hostTierWarning = r.hostTierWarning;
  };
  // variance: whether the engine computes the data's variance in this pass (sklearn's tol scale). It does not change
  // between passes, so it is asked until a pass (or the checkpoint resumed from) has given it: once per run.
  const pass = async (mode: 'fit' | 'assign', variance: boolean, distances = false, onBegin?: () => void, chain?: PassChain): Promise<PassResult> => {
    checkAbort();
    let firstRow: number | undefined;
    if (preload) {
      firstRow = await preload.finish();
      preload = undefined;
      checkAbort();
    }
    try {
      const r = await runPass(engine, source, mode, { distances, dataVariance: variance, readTime, firstRow, onBegin, chain });
      if (!tiers) o.onFirstPass?.(r.heldRows);
      noteTiers(r);
      return r;
    } catch (err) {
      if (err instanceof CancelledError && o.signal?.aborted) throw new KmeansAbortedError(lastCheckpoint, o.signal.reason);
      throw err;
    }
  };
  // On a device engine the passes overlap the driver's own work (below), and each fit pass carries the stopping rule,
  // so that the engine begins the next one itself when the rule says it follows: the device does not wait for the
  // round trip through JS between passes (the next beginPass takes that pass over; results are the same).
  const ahead = engine.plan.backend !== 'cpu';
  // A fit pass started ahead: a failure waits until the caller awaits it. `read`: the centroids it starts from, read by
  // the engine right behind its begin (engine.readCentroids), when asked for. `iteration`: the pass's own.
  const startFit = (variance: number, iteration: number, readCentroids: boolean) => {
    let read: Promise<Float32Array> | undefined;
    const started = performance.now();
    const chain = ahead ? { tol: spec.tol, tolReassign: spec.tolReassign, variance, passesLeft: spec.maxIter - iteration } : undefined;
    const running = pass('fit', !Number.isFinite(variance), false, readCentroids ? () => { read = engine.readCentroids(); } : undefined, chain);
    running.catch(() => {});
    read?.catch(() => {});
    return { running, read, started };
  };
  // Ends a pass started ahead when its iteration will not be used (the run is failing); never throws.
  const drop = async (p: Promise<unknown>) => {
    engine.cancel();
    await p.catch(() => {});
  };

  try {
    let history: IterationReport[] = [];
    let initMethod: InitMethod;
    let dataVariance = NaN;
    let emptyReseeded = 0;
    let stop: StopReason | null = null;
    let previous: Float32Array; // C(t−1), for the next checkpoint

    const t0 = performance.now();
    if (o.resume) {
      const cp = o.resume;
      checkCheckpoint(cp, source.rows, source.dims, spec.k, spec.metric, spec.maxIter);
      history = cp.history.map((h) => ({ ...h }));
      initMethod = cp.initMethod;
      dataVariance = cp.dataVariance;
      emptyReseeded = history.reduce((s, h) => s + h.emptyReseeded, 0);
      stop = stopReason(history[history.length - 1], spec, dataVariance);
      if (stop === null) {
        // rebuild L(t): the labels of C(t−1)
        engine.setCentroids(cp.previousCentroids);
        const r = await pass('assign', !Number.isFinite(dataVariance));
        if (Number.isFinite(r.dataVariance)) dataVariance = r.dataVariance;
      }
      engine.setCentroids(cp.centroids);
      previous = cp.centroids;
      timings.resumeMs = performance.now() - t0;
      log?.info({ iteration: cp.iteration, stop }, 'resumed from checkpoint');
    } else {
      initMethod = await applyInit(engine, source.dims, spec, await (o.initRows ?? readInitRows(source, spec, o.init)));
      previous = engine.centroids();
      timings.initMs = performance.now() - t0;
      log?.info({ initMethod, ms: Math.round(timings.initMs) }, 'initialized centroids');
      if (spec.maxIter === 0) stop = 'maxIter';
    }

    const tIter = performance.now();
    // On a device engine, iteration t+1's pass starts as soon as iteration t's stopping rule says there is one: C(t)
    // (its checkpoint) is read by the engine behind that pass's begin, and onIteration (progress, checkpoint) runs
    // beside the pass, so the device does not wait for either. The reports, checkpoints and results are those of one
    // pass after the other. On the CPU backend they run one after the other: its pass takes every core (and
    // its resident rows are computed in the begin's task), so the read would wait for the pass and the bookkeeping
    // beside it would only take cores from it.
    let next: ReturnType<typeof startFit> | undefined;
    while (stop === null) {
      const iteration = history.length + 1;
      const current = next ?? startFit(dataVariance, iteration, false);
      next = undefined;
      let r: PassResult;
      try {
        r = await current.running;
      } catch (err) {
        // aborted while the previous iteration's bookkeeping ran: hand out the newest checkpoint
        if (err instanceof KmeansAbortedError) throw new KmeansAbortedError(lastCheckpoint, err.reason);
        throw err;
      }
      if (Number.isFinite(r.dataVariance)) dataVariance = r.dataVariance;
      const report: IterationReport = {
        iteration,
        inertia: r.inertia,
        reassigned: r.reassigned,
        reassignedFraction: r.reassigned / source.rows,
        shift: r.shift,
        ms: performance.now() - current.started,
        emptyReseeded: r.emptyReseeded,
      };
      history.push(report);
      emptyReseeded += r.emptyReseeded;
      stop = stopReason(report, spec, dataVariance);
      let centroids: Float32Array;
      if (stop === null && ahead) {
        next = startFit(dataVariance, iteration + 1, true);
        const following = next;
        if (!following.read) {
          await following.running; // it did not begin: it throws (aborted)
          throw new Error('k-means driver: a pass began without reading its centroids');
        }
        try {
          centroids = await following.read;
        } catch (err) {
          await drop(following.running);
          throw err;
        }
      } else {
        centroids = engine.centroids();
      }
      const checkpoint: KmeansCheckpoint = {
        version: 1, iteration, k: spec.k, dims: source.dims, rows: source.rows, metric: spec.metric, initMethod,
        centroids, previousCentroids: previous, history: history.map((h) => ({ ...h })), dataVariance,
        sumsPlan: { backend: engine.plan.backend, chunkRows: engine.plan.chunkRows },
      };
      previous = centroids;
      lastCheckpoint = checkpoint;
      log?.debug?.({ ...report, stop }, 'iteration');
      if (o.onIteration) {
        try {
          await o.onIteration(report, checkpoint);
        } catch (err) {
          if (next) await drop(next.running);
          throw err;
        }
      }
    }
    timings.iterateMs = performance.now() - tIter;

    const ta = performance.now();
    // an assign pass leaves the centroids as they are: these are the result's
    const centroids = engine.centroids();
    o.onFinalCentroids?.(centroids);
    const final = await pass('assign', !Number.isFinite(dataVariance), spec.distances ?? false);
    timings.assignMs = performance.now() - ta;
    if (Number.isFinite(final.dataVariance)) dataVariance = final.dataVariance;
    timings.readMs = readTime.ms;
    const result: KmeansResult = {
      centroids,
      iterations: history.length,
      converged: stop !== 'maxIter',
      stopReason: stop,
      history,
      inertia: final.inertia,
      counts: final.counts,
      emptyReseeded,
      initMethod,
      dataVariance,
      timings,
      tiers: tiers!,
    };
    if (o.resume) result.resumedFrom = o.resume.iteration;
    log?.info({ iterations: result.iterations, stopReason: stop, inertia: result.inertia }, 'k-means done');
    return result;
  } finally {
    o.signal?.removeEventListener('abort', onAbort);
  }
}
