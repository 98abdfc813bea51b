/**
 * The BullMQ processor: one attempt of one job, DESIGN.md "The path of one job" steps 1–6.
 *
 *   1. validate   parseJobSpec again (the worker's limits), cancel check
 *   2. open       (job-open.ts) claim the job's writes (fencing) ∥ output bucket check ∥ S3RowSource: one ranged GET of
 *                 the header; dataset limits; the local cache (KMFLEET_CACHE_DIR), or for datasets up to 1 GiB the
 *                 memory cache, prefetching as soon as the header is read (downloaded once for k-means++ and every
 *                 pass; k-means++'s uniform sample touches every block, so on that init the first pass starts once
 *                 the download is complete; random / given / previous init and resumes overlap it)
 *   3. start      the newest checkpoint matching spec hash + dataset ETag, else init (kmeans++ | random | given), whose
 *                 rows (k-means++'s sample) are read while the engine opens
 *   4. iterate    runKmeans; after each iteration: iteration stream (fenced by the lock) + progress → Redis, sent
 *                 beside the next pass; checkpoint → S3 (fenced) when the pacer says so (every checkpointEvery
 *                 iterations, at most one per KMFLEET_CHECKPOINT_MIN_INTERVAL_MS)
 *   5. finish     into this attempt's staging prefix: centroids.npy (beside the final assign pass), assignments.npy
 *                 (multipart), [distances.npy]; then the commit (outputs/writer.ts): the commit point in Redis (a
 *                 cancel before it wins, one after it is refused), the files copied into place, summary.json LAST
 *   6. record     the JobResult: BullMQ return value + the model's result history; the engine is closed (and its GPU
 *                 given back) once BullMQ has recorded the job's end (engine-releases.ts)
 *
 * Outcomes: user problems (bad spec, bad or missing dataset, k > rows…) → UnrecoverableError naming the problem, no
 * retry, no outputs. Cancel (from any process, producer/cancel.ts), up to the commit point, uploads included →
 * UnrecoverableError("cancelled"). Preemption
 * (SIGTERM, `preempt` aborted) → stop at a chunk boundary, checkpoint, job.moveToWait(token) + WaitingError: the job is
 * back in the queue and attemptsMade is unchanged. Lost lock (another worker has the job) → stop at the next chunk,
 * write nothing. Anything else is thrown as is and BullMQ retries it (attempts and backoff: the producer's job options).
 */
import { WaitingError, type Job } from 'bullmq';
import type { RedisClient } from '../producer/job-state.js';
import * as native from '../native/index.js';
import type { Engine, EngineOptions } from '../native/index.js';
import { CANCEL_REASON, type CancelListener } from '../producer/cancel.js';
import type { JobData } from '../producer/job-data.js';
import { appendIteration } from '../producer/job-state.js';
import type { Keys } from '../producer/keys.js';
import { makeProgress, type JobPhase } from '../producer/progress.js';
import { recordResult, type JobResult } from '../producer/results.js';
import { parseJobSpec, specHash as computeSpecHash, type JobSpec } from '../producer/spec.js';
import { CancelledBeforeCommitError, FencedError } from './checkpoints/errors.js';
import { BackgroundCheckpointSaver } from './checkpoints/background-saver.js';
import { CheckpointPacer } from './checkpoints/pacer.js';
import { CheckpointStore } from './checkpoints/store.js';
import type { WorkerConfig } from './config.js';
import { MemoryCachedRowSource } from './dataset/memory-cache.js';
import { ResidentPreload } from './dataset/resident-preload.js';
import type { RowSource } from './dataset/row-source.js';
import { JobInputError, toJobError } from './failures.js';
import { resolveInit } from './initial-centroids.js';
import { buildJobResult, buildSummary } from './job-summary.js';
import { checkCheckpoint, decodeCheckpoint } from './kmeans/checkpoint.js';
import { runKmeans } from './kmeans/driver.js';
import { KmeansAbortedError } from './kmeans/errors.js';
import { readInitRows } from './kmeans/init.js';
import type { IterationReport, KmeansCheckpoint, KmeansResult, KmeansSpec } from './kmeans/types.js';
import type { DevicePool } from './device-pool.js';
import type { EngineReleases } from './engine-releases.js';
import { IterationWrites } from './iteration-writes.js';
import type { LockLossRegistry } from './lock-loss.js';
import { openJobEngine, type OpenEngine } from './job-engine.js';
import { openJob } from './job-open.js';
import { jobLogger, type Logger } from './logger.js';
import type { FleetMetrics, JobOutcome } from './metrics/index.js';
import { OutputWriter, type OutputFile } from './outputs/writer.js';
import type { S3Handle } from './s3/client.js';

export type { OpenEngine };

export interface ProcessorDeps {
  config: WorkerConfig;
  /** a non-blocking connection for our own Redis writes */
  redis: RedisClient;
  keys: Keys;
  s3: S3Handle;
  logger: Logger;
  cancels: CancelListener;
  /** aborted when this process must stop (SIGTERM): running jobs checkpoint and go back to the queue */
  preempt: AbortSignal;
  metrics?: FleetMetrics;
  openEngine?: OpenEngine;
  /** aborted for a job whose BullMQ lock could not be renewed (worker.ts wires 'lockRenewalFailed') */
  lockLoss?: LockLossRegistry;
  /** GPUs of this process: each running job takes its own */
  devices?: DevicePool;
  /**
   * Closes a finished job's engine (and gives its GPU back) after BullMQ recorded the job's end rather than before
   * (worker.ts wires its events); without it the engine is closed as the processor returns.
   */
  releases?: EngineReleases;
}

type Processor = (job: Job<JobData, JobResult>, token?: string, signal?: AbortSignal) => Promise<JobResult>;

export function createProcessor(deps: ProcessorDeps): Processor {
  const openEngine: OpenEngine = deps.openEngine ?? ((o) => native.Engine.open(o));
  // Three declared parameters: BullMQ passes its AbortSignal (worker.cancelJob) only to processors that take it.
  return async (job, token, bullSignal) => runJob(deps, openEngine, job, token, bullSignal);
}

async function runJob(
  deps: ProcessorDeps,
  openEngine: OpenEngine,
  job: Job<JobData, JobResult>,
  token: string | undefined,
  bullSignal: AbortSignal | undefined,
): Promise<JobResult> {
  const { config, redis, keys, s3 } = deps;
  const jobId = job.id!;
  const attempt = job.attemptsMade + 1;
  const log = jobLogger(deps.logger, jobId, attempt);
  const startedAt = Date.now();
  const t0 = performance.now();
  const running = deps.metrics?.jobStarted();
  let outcome: JobOutcome = 'failed';
  const cancelWatch = deps.cancels.watch(jobId);
  const cancelSignals = [cancelWatch.signal, ...(bullSignal ? [bullSignal] : [])];
  const lockWatch = deps.lockLoss?.watch(jobId);
  const lockLost = () => lockWatch?.signal.aborted === true;
  const stop = AbortSignal.any([...cancelSignals, deps.preempt, ...(lockWatch ? [lockWatch.signal] : [])]);
  const cancelled = () => cancelSignals.some((s) => s.aborted);

  let source: RowSource | undefined;
  let engine: Engine | undefined;
  let preload: ResidentPreload | undefined;
  let outputs: OutputWriter | undefined;
  let store: CheckpointStore | undefined;
  let saver: BackgroundCheckpointSaver | undefined;
  let device: number | undefined;
  let spec: JobSpec | undefined;
  let hash = '';
  let etag = '';
  /** bookkeepingMs: time the run spent between iterations (Redis writes, checkpoints written in line) */
  const timings = { openMs: 0, uploadMs: 0, bookkeepingMs: 0 };

  const progress = async (phase: JobPhase, iteration: number, history: IterationReport[] = []) => {
    const recent = history.slice(-5);
    const last = history[history.length - 1];
    await job.updateProgress(
      makeProgress({
        phase,
        iteration,
        maxIter: spec?.maxIter ?? 0,
        rows: source?.rows,
        last: last && { iteration: last.iteration, inertia: last.inertia, reassigned: last.reassigned, shift: last.shift, ms: last.ms },
        msPerIteration: recent.length ? recent.reduce((s, h) => s + h.ms, 0) / recent.length : undefined,
      }),
    );
  };
  try {
    // ---- 1. validate, claim ----
    spec = parseJobSpec(job.data?.spec, config.limits);
    hash = computeSpecHash(spec);
    if (job.data.specHash && job.data.specHash !== hash) {
      log.warn({ enqueued: job.data.specHash, computed: hash }, 'spec hash differs from the producer\'s (another version?); using ours');
    }
    if (!token) throw new Error('processor called without a lock token (manual processing is not supported)');
    if (cancelled()) throw new KmeansAbortedError(undefined, CANCEL_REASON);
    const lock = { key: `${job.queueQualifiedName}:${jobId}:lock`, token };
    store = new CheckpointStore({
      redis,
      s3,
      jobId,
      output: spec.output,
      recordKey: keys.checkpoint(jobId),
      lockKey: lock.key,
      token,
      cancelKey: keys.cancel(jobId),
    });
    log.info({ dataset: spec.dataset.uri, k: spec.k, maxIter: spec.maxIter }, 'job started');

    // ---- 2. claim, open the dataset (job-open.ts: all in flight together; the download starts at once) ----
    const opened = await openJob({ s3, spec, config, store, progress: () => progress('opening', 0), stop, log });
    const s3Source = opened.s3Source;
    source = opened.source;
    etag = s3Source.etag;
    saver = new BackgroundCheckpointSaver(store, hash, etag, (ms) => deps.metrics?.checkpointWritten(ms));
    const claim = store.claim;
    timings.openMs = performance.now() - t0;
    log.info({ claim, dataset: s3Source.describe(), ms: Math.round(timings.openMs) }, 'dataset opened');

    // ---- 3. checkpoint or init ----
    await progress('planning', 0);
    let resume: KmeansCheckpoint | undefined;
    const found = await store.loadLatest(hash, etag);
    if (found.record) {
      try {
        const cp = decodeCheckpoint(found.bytes);
        checkCheckpoint(cp, source.rows, source.dims, spec.k, spec.metric, spec.maxIter);
        resume = cp;
        saver.lastSaved = cp.iteration;
        log.info({ iteration: cp.iteration, generation: found.record.generation, uri: found.record.uri }, 'resuming from checkpoint');
      } catch (err) {
        log.warn({ err, uri: found.record.uri }, 'checkpoint unusable; starting over');
      }
    } else if (found.reason !== 'no checkpoint') {
      log.info({ reason: found.reason }, 'not resuming');
    }
    const init = resume ? undefined : await resolveInit(spec, redis, keys, s3);
    if (init?.note) log.info(init.note);
    const kmeansSpec: KmeansSpec = {
      k: spec.k,
      metric: spec.metric,
      init: init?.init ?? 'kmeans++',
      maxIter: spec.maxIter,
      tol: spec.tol,
      tolReassign: spec.tolReassign,
      seed: spec.seed,
      distances: config.writeDistances,
    };
    // the init's rows (k-means++'s sample) are read while the engine opens, ~20 ms on CUDA: from a pod's cached file
    // they were read after it; a failure here is the run's (the driver awaits it), unless the open fails first
    const initRows = resume ? undefined : readInitRows(source, kmeansSpec);
    initRows?.catch(() => {});

    const engineOptions: EngineOptions = {
      rows: source.rows,
      dims: source.dims,
      k: spec.k,
      metric: spec.metric,
      dtype: source.dtype,
      backend: config.backend ?? spec.backend,
      precision: spec.precision,
    };
    if (config.chunkRows !== undefined) engineOptions.chunkRows = config.chunkRows;
    if (config.threads !== undefined) engineOptions.threads = config.threads;
    if (config.memoryBudgetBytes !== undefined) engineOptions.memoryBudget = config.memoryBudgetBytes;
    // an engine of an earlier job waiting to be closed gives its memory (and its GPU) back before this one takes any
    deps.releases?.releaseAll();
    if (engineOptions.backend !== 'cpu' && deps.devices && deps.devices.size > 0) {
      device = deps.devices.acquire();
      if (device !== undefined) engineOptions.device = device;
    }
    engine = await openJobEngine(openEngine, engineOptions, resume, log);
    reportDevice(deps.metrics, engine, engineOptions.device ?? 0, log);
    log.info({ plan: engine.plan, gpu: engineOptions.device }, 'engine open');  // gpu: the CUDA ordinal this job took
    // rows still downloading go to the engine's resident memory as they land, not in the first pass
    if (source instanceof MemoryCachedRowSource) preload = ResidentPreload.start(engine, source);

    // ---- 4. iterate ----
    await progress(resume ? 'iterating' : 'initializing', resume?.iteration ?? 0, resume?.history);
    const pacer = new CheckpointPacer(spec.checkpointEvery, config.checkpointMinIntervalMs);
    // each iteration's Redis writes (history + progress) go out beside the next pass, in order (iteration-writes.ts)
    const iterationWrites = new IterationWrites();
    const owner = store;
    const writer = new OutputWriter({
      s3,
      output: spec.output,
      jobId,
      attempt: `c${owner.claim}`,
      fence: () => owner.assertOwner(),
      beginCommit: () => owner.beginCommit(),
      // a cancel or a lost lock stops the uploads at once; a preemption lets them finish (the job is nearly done)
      signal: AbortSignal.any([...cancelSignals, ...(lockWatch ? [lockWatch.signal] : [])]),
      partBytes: config.uploadPartBytes,
    });
    outputs = writer;
    const { k } = spec;
    const dims = source.dims;
    let centroidsUpload: Promise<OutputFile> | undefined;
    const result: KmeansResult = await runKmeans({
      engine,
      source,
      spec: kmeansSpec,
      resume,
      initRows,
      preload,
      signal: stop,
      log,
      onIteration: async (report, cp) => {
        const tb = performance.now();
        deps.metrics?.iterationDone(report.ms, source!.rows);
        await iterationWrites.next(async () => {
          const [written] = await Promise.all([
            appendIteration(redis, keys, jobId, {
              iteration: report.iteration,
              inertia: report.inertia,
              reassigned: report.reassigned,
              shift: report.shift,
              ms: report.ms,
            }, lock),
            progress('iterating', report.iteration, cp.history),
          ]);
          // the job is gone from Redis (a restart without persistence) or another worker's: stop writing for it
          if (!written) throw new FencedError(jobId, 'lock-lost');
        });
        // on the cpu backend a save is written between iterations: beside a pass it only takes cores from the engine
        if (pacer.take(report.iteration)) await saver!.submit(cp, engine!.plan.backend !== 'cpu');
        log.info({ iteration: report.iteration, inertia: report.inertia, reassigned: report.reassigned, ms: Math.round(report.ms) }, 'iteration');
        timings.bookkeepingMs += performance.now() - tb;
      },
      // centroids.npy goes up beside the final assign pass (which only labels rows); if the run fails after all,
      // discard() waits for this upload before it deletes what was written
      onFinalCentroids: (centroids) => {
        centroidsUpload = writer.writeCentroids(centroids, k, dims);
        centroidsUpload.catch(() => {}); // settled with the other uploads
      },
    });
    await Promise.all([saver.flush(), iterationWrites.flush()]);
    if (s3Source.stats.bytes) deps.metrics?.s3BytesRead(s3Source.stats.bytes);

    // ---- 5. outputs, summary.json last ----
    const writing = progress('writing', result.iterations, result.history);
    writing.catch(() => {}); // awaited after the uploads
    const tu = performance.now();
    const eng = engine;
    const rows = source.rows;
    // The files are independent objects (summary.json, the commit point, comes after all of them): uploaded together.
    // All settle before a failure is thrown, so that discard() sees every object that was written.
    const uploads = await Promise.allSettled([
      centroidsUpload ?? writer.writeCentroids(result.centroids, k, dims),
      writer.writeRows('assignments.npy', '<i4', rows, (f, n) => eng.labels(f, n)),
      config.writeDistances ? writer.writeRows('distances.npy', '<f4', rows, (f, n) => eng.distances(f, n)) : undefined,
    ]);
    const failedUpload = uploads.find((u) => u.status === 'rejected');
    if (failedUpload) throw failedUpload.reason;
    await writing;
    timings.uploadMs = performance.now() - tu;
    const jobResult = buildJobResult({
      jobId,
      attempt,
      spec,
      specHash: hash,
      dataset: { etag, rows: source.rows, dims: source.dims },
      plan: engine.plan,
      result,
      outputs,
      distances: config.writeDistances,
      timings: {
        totalMs: performance.now() - t0,
        openMs: timings.openMs,
        checkpointMs: saver.saveMs,
        checkpointWaitMs: saver.waitMs,
        bookkeepingMs: timings.bookkeepingMs,
        checkpoints: saver.saves,
        uploadMs: timings.uploadMs,
        s3BytesRead: s3Source.stats.bytes,
        s3Requests: s3Source.stats.requests,
        s3ReadMs: s3Source.stats.readMs,
      },
      resumedFromGeneration: found.record?.generation,
      initFrom: init?.from,
      startedAt,
      finishedAt: Date.now(),
    });
    const summary = buildSummary(jobResult, result, attempt);
    await outputs.commit(summary);

    // ---- 6. record ----
    // independent writes after the commit point: together
    await Promise.all([
      spec.name ? recordResult(redis, keys, spec.name, jobResult) : undefined,
      progress('done', result.iterations, result.history),
      config.keepCheckpoints ? undefined : store.cleanup(),
    ]);
    outcome = 'completed';
    log.info({ iterations: result.iterations, inertia: result.inertia, stopReason: result.stopReason, ms: jobResult.timings.totalMs }, 'job completed');
    return jobResult;
  } catch (err) {
    await saver?.flush().catch(() => {});
    await outputs?.discard();
    if (lockLost() && !(err instanceof FencedError)) {
      outcome = 'released';
      log.warn('lost the job\'s lock (another worker may have it now); stopped without writing');
      throw new FencedError(jobId, 'lock-lost');
    }
    if (err instanceof CancelledBeforeCommitError || err instanceof KmeansAbortedError || (stop.aborted && !(err instanceof FencedError))) {
      if (cancelled() || err instanceof CancelledBeforeCommitError) {
        outcome = 'cancelled';
        log.info('job cancelled');
        if (store?.claim !== undefined) await store.cleanup().catch(() => {});
        throw toJobError(new JobInputError(CANCEL_REASON));
      }
      if (deps.preempt.aborted && token) {
        outcome = 'released';
        const cp = err instanceof KmeansAbortedError ? err.checkpoint : undefined;
        if (cp && saver) await saver.saveNow(cp);
        await job.moveToWait(token);
        log.info({ checkpoint: saver?.lastSaved ?? 0 }, 'preempted: checkpointed and handed the job back');
        throw new WaitingError();
      }
    }
    if (err instanceof FencedError) {
      outcome = 'released';
      log.warn({ err: err.message }, 'lost the job to another worker; stopping without writing');
      throw err;
    }
    const mapped = toJobError(err);
    outcome = mapped === err ? 'retried' : 'failed';
    if (mapped !== err) {
      log.warn({ problem: (mapped as Error).message }, 'job failed (not retried)');
      // no retry will use them
      if (store?.claim !== undefined) await store.cleanup().catch(() => {});
    } else log.error({ err }, 'job attempt failed');
    throw mapped;
  } finally {
    cancelWatch.dispose();
    lockWatch?.dispose();
    preload?.stop(); // the source's close() waits for loads in flight
    const opened = engine;
    const release = () => {
      try {
        opened?.close();
      } finally {
        deps.devices?.release(device);
      }
    };
    if (deps.releases && opened) deps.releases.defer(jobId, release);
    else release();
    await source?.close().catch(() => {});
    running?.end(outcome === 'retried' && attempt >= (job.opts.attempts ?? 1) ? 'failed' : outcome);
  }
}

/**
 * The engine's device for /metrics: backend and device labels, and on CUDA the compute capability and the device
 * memory in use once the engine has planned and allocated (what an operator compares with the card's size). On CUDA
 * the device label is the card's name: the plan's device also names the assignment kernel, which depends on the
 * job's dims, and one card must stay one series.
 */
function reportDevice(metrics: FleetMetrics | undefined, engine: Engine, ordinal: number, log: Logger): void {
  if (!metrics) return;
  if (engine.plan.backend !== 'cuda') {
    metrics.deviceInfo({ backend: engine.plan.backend, device: engine.plan.device });
    return;
  }
  try {
    const gpu = native.gpuInfo().devices.find((d) => d.ordinal === ordinal);
    const device = gpu?.name ?? engine.plan.device;
    metrics.deviceInfo({ backend: 'cuda', device, computeCapability: gpu?.computeCapability });
    if (gpu) metrics.deviceMemoryUsed(gpu.totalMemory - gpu.freeMemory, device);
  } catch (err) {
    log.warn({ err }, 'device query for metrics failed'); // metrics must never fail a job
  }
}

