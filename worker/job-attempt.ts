/**
 * One attempt of one job, as the steps of docs/DESIGN.md "The path of one job": each step a method, the state it
 * builds up a field, so that processor.ts reads as the list of steps and settle() as the list of outcomes.
 *
 *   validate → open (claim, dataset) → start (checkpoint or init, engine) → iterate → finish (outputs, commit)
 *   → record; settle(err) on failure; release() always.
 */
import { WaitingError, type Job } from 'bullmq';
import { gpuInfo, type Engine, type EngineOptions } from '../native/index.js';
import { CANCEL_REASON } from '../producer/cancel.js';
import type { CancelWatch } from './cancel-listener.js';
import type { JobData } from '../producer/job-data.js';
import { appendIteration } from '../producer/job-state.js';
import { makeProgress, type JobPhase, type RowsPerPass } from '../producer/progress.js';
import { recordResult, type JobResult } from '../producer/results.js';
import { parseJobSpec, specHash as computeSpecHash, type JobSpec } from '../producer/spec.js';
import { BackgroundCheckpointSaver } from './checkpoints/background-saver.js';
import { CancelledBeforeCommitError, FencedError } from './checkpoints/errors.js';
import { CheckpointPacer } from './checkpoints/pacer.js';
import { CheckpointStore } from './checkpoints/store.js';
import type { S3RowSource } from './dataset/s3-source.js';
import { CachedRowSource } from './dataset/cache.js';
import { MemoryCachedRowSource } from './dataset/memory-cache.js';
import { ResidentPreload } from './dataset/resident-preload.js';
import { chooseGpus, keptDatasetBytes, type RowSource, checkCheckpoint, decodeCheckpoint, runKmeans, KmeansAbortedError, readInitRows, type InitRows, type IterationReport, type KmeansCheckpoint, type KmeansResult, type KmeansSpec, type FedFrom } from '../core/index.js';
import { JobInputError, toJobError } from './failures.js';
import { resolveInit, type ResolvedInit } from './initial-centroids.js';
import { IterationWrites } from './iteration-writes.js';
import { openJobEngine, type OpenEngine } from './job-engine.js';
import { openJob } from './job-open.js';
import { buildJobResult, buildSummary } from './job-summary.js';
import { jobLogger, type Logger } from './logger.js';
import type { FleetMetrics, JobOutcome } from './metrics/index.js';
import { reportDevice } from './metrics/report-device.js';
import { OutputWriter, type OutputFile } from './outputs/writer.js';
import type { ProcessorDeps } from './processor.js';
import { iterationSpan, phaseSpan } from './tracing.js';

/** Where the run starts: a checkpoint to resume, or an init and the rows it reads. */
interface Start {
  resume?: KmeansCheckpoint;
  resumedFromGeneration?: number;
  init?: ResolvedInit;
  initRows?: Promise<InitRows>;
  kmeansSpec: KmeansSpec;
}

export class JobAttempt {
  readonly jobId: string;
  readonly attempt: number;
  readonly log: Logger;
  /** how the attempt ended, for the metrics */
  outcome: JobOutcome = 'failed';

  private readonly startedAt = Date.now();
  private readonly t0 = performance.now();
  private readonly running: ReturnType<FleetMetrics['jobStarted']> | undefined;
  private readonly cancelWatch: CancelWatch;
  private readonly cancelSignals: AbortSignal[];
  private readonly lockWatch: { signal: AbortSignal; dispose: () => void } | undefined;
  /** a cancel, a preemption or a lost lock: the engine stops at the next chunk */
  private readonly stop: AbortSignal;

  private spec?: JobSpec;
  private hash = '';
  private lock?: { key: string; token: string };
  private store?: CheckpointStore;
  private s3Source?: S3RowSource;
  private source?: RowSource;
  private releaseMemoryAfterFirstPass = false;
  private saver?: BackgroundCheckpointSaver;
  private engine?: Engine;
  private devices: number[] = [];
  private preload?: ResidentPreload;
  private outputs?: OutputWriter;
  /** bookkeepingMs: time the run spent between iterations (Redis writes, checkpoints written in line) */
  private readonly timings = { openMs: 0, uploadMs: 0, bookkeepingMs: 0 };

  constructor(
    private readonly deps: ProcessorDeps,
    private readonly openEngine: OpenEngine,
    private readonly job: Job<JobData, JobResult>,
    private readonly token: string | undefined,
    bullSignal: AbortSignal | undefined,
  ) {
    this.jobId = job.id!;
    this.attempt = job.attemptsMade + 1;
    this.log = jobLogger(deps.logger, this.jobId, this.attempt);
    this.running = deps.metrics?.jobStarted();
    this.cancelWatch = deps.cancels.watch(this.jobId);
    this.cancelSignals = [this.cancelWatch.signal, ...(bullSignal ? [bullSignal] : [])];
    this.lockWatch = deps.lockLoss?.watch(this.jobId);
    this.stop = AbortSignal.any([...this.cancelSignals, deps.preempt, ...(this.lockWatch ? [this.lockWatch.signal] : [])]);
  }

  private get cancelled(): boolean {
    return this.cancelSignals.some((s) => s.aborted);
  }

  private get lockLost(): boolean {
    return this.lockWatch?.signal.aborted === true;
  }

  /** 1. The spec again, with this worker's limits; a pending cancel ends the job here. */
  validate(): void {
    const { config, keys } = this.deps;
    const spec = (this.spec = parseJobSpec(this.job.data?.spec, config.limits));
    this.hash = computeSpecHash(spec);
    if (this.job.data.specHash && this.job.data.specHash !== this.hash) {
      this.log.warn({ enqueued: this.job.data.specHash, computed: this.hash }, 'spec hash differs from the producer\'s (another version?); using ours');
    }
    if (!this.token) throw new Error('processor called without a lock token (manual processing is not supported)');
    if (this.cancelled) throw new KmeansAbortedError(undefined, CANCEL_REASON);
    this.lock = { key: `${this.job.queueQualifiedName}:${this.jobId}:lock`, token: this.token };
    this.store = new CheckpointStore({
      redis: this.deps.redis,
      s3: this.deps.s3,
      jobId: this.jobId,
      output: spec.output,
      recordKey: keys.checkpoint(this.jobId),
      lockKey: this.lock.key,
      token: this.token,
      cancelKey: keys.cancel(this.jobId),
    });
    this.log.info({ dataset: spec.dataset.uri, k: spec.k, maxIter: spec.maxIter }, 'job started');
  }

  /** 2. Claim the job's writes and open the dataset (job-open.ts: all in flight together; the download starts at once). */
  async open(): Promise<void> {
    const store = this.store!;
    const opened = await openJob({ s3: this.deps.s3, spec: this.spec!, config: this.deps.config, store, progress: () => this.progress('opening', 0), stop: this.stop, log: this.log });
    this.s3Source = opened.s3Source;
    this.source = opened.source;
    this.releaseMemoryAfterFirstPass = opened.releaseMemoryAfterFirstPass;
    this.saver = new BackgroundCheckpointSaver(store, this.hash, this.s3Source.etag, (ms) => this.deps.metrics?.checkpointWritten(ms));
    this.timings.openMs = performance.now() - this.t0;
    this.log.info({ claim: store.claim, dataset: this.s3Source.describe(), ms: Math.round(this.timings.openMs) }, 'dataset opened');
  }

  /** 3. The newest matching checkpoint, else the init (whose rows are read while the engine opens); the engine. */
  async start(): Promise<Start> {
    const { config, redis, keys, s3 } = this.deps;
    const spec = this.spec!;
    const source = this.source!;
    await this.progress('planning', 0);
    const { resume, generation } = await this.findCheckpoint();
    const init = resume ? undefined : await resolveInit(spec, redis, keys, s3);
    if (init?.note) this.log.info(init.note);
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
    // read while the engine opens; a failure here is the run's (the driver awaits it), unless the open fails first
    const initRows = resume ? undefined : readInitRows(source, kmeansSpec);
    initRows?.catch(() => {});
    await this.openEngineFor(resume);
    return { resume, resumedFromGeneration: generation, init, initRows, kmeansSpec };
  }

  private async findCheckpoint(): Promise<{ resume?: KmeansCheckpoint; generation?: number }> {
    const spec = this.spec!;
    const source = this.source!;
    const found = await this.store!.loadLatest(this.hash, this.s3Source!.etag);
    if (!found.record) {
      if (found.reason !== 'no checkpoint') this.log.info({ reason: found.reason }, 'not resuming');
      return {};
    }
    try {
      const cp = decodeCheckpoint(found.bytes);
      checkCheckpoint(cp, source.rows, source.dims, spec.k, spec.metric, spec.maxIter);
      this.saver!.lastSaved = cp.iteration;
      this.log.info({ iteration: cp.iteration, generation: found.record.generation, uri: found.record.uri }, 'resuming from checkpoint');
      return { resume: cp, generation: found.record.generation };
    } catch (err) {
      this.log.warn({ err, uri: found.record.uri }, 'checkpoint unusable; starting over');
      return {};
    }
  }

  private async openEngineFor(resume: KmeansCheckpoint | undefined): Promise<void> {
    const { config, devices, releases } = this.deps;
    const source = this.source!;
    const options: EngineOptions = {
      rows: source.rows,
      dims: source.dims,
      k: this.spec!.k,
      metric: this.spec!.metric,
      dtype: source.dtype,
      backend: config.backend ?? this.spec!.backend,
      precision: this.spec!.precision,
    };
    if (config.chunkRows !== undefined) options.chunkRows = config.chunkRows;
    if (config.threads !== undefined) options.threads = config.threads;
    if (config.gpuMemoryBytes !== undefined) {
      options.memoryBudget = config.gpuMemoryBytes; // the CPU backend's resident rows; CUDA's within the cap below
      if (config.gpuMemoryBytes > 0) options.deviceMemory = config.gpuMemoryBytes;
    }
    if (config.hostMemoryBytes !== undefined) options.hostMemoryBudget = config.hostMemoryBytes;
    // an engine of an earlier job waiting to be closed gives its memory (and its GPU) back before this one takes any
    releases?.releaseAll();
    if (options.backend !== 'cpu' && devices && devices.size > 0) {
      // a job across GPUs may hold them all: wait for one, unless KMFLEET_CONCURRENCY asked for more jobs than GPUs
      if ((config.concurrency ?? 0) <= devices.size) await devices.anyFree();
      this.devices = devices.take(this.chooseDevices(devices.freeOrdinals()));
      if (this.devices.length > 0) options.device = this.devices[0];
      if (this.devices.length > 1) options.devices = this.devices;
    }
    const engine = (this.engine = await openJobEngine(this.openEngine, options, resume, this.log));
    reportDevice(this.deps.metrics, engine, options.device ?? 0, this.log);
    this.log.info({ plan: engine.plan, gpus: this.devices, rows: this.tierPlan() }, 'engine open'); // gpus: the CUDA ordinals this job took
    const fed = source.rows - engine.plan.residentRows - engine.plan.hostRows;
    if (fed > 0 && this.fedFrom() === 's3') {
      this.log.warn({ rows: fed, bytes: fed * source.rowBytes }, 'rows that fit neither the device nor host memory are read from S3 on every pass: set KMFLEET_CACHE_DIR (a local disk) or raise KMFLEET_HOST_MEMORY');
    }
    // rows still downloading go to the engine's resident memory as they land, not in the first pass
    if (source instanceof MemoryCachedRowSource) this.preload = ResidentPreload.start(engine, source);
  }

  /** The free GPUs this job runs on: spec.gpus, else the worker's KMFLEET_GPUS_PER_JOB (core/gpu-count.ts). */
  private chooseDevices(free: number[]): number[] {
    const wanted = this.spec!.gpus ?? this.deps.config.gpusPerJob;
    const memory = wanted === 'auto' ? new Map(gpuInfo().devices.map((d) => [d.ordinal, d.freeMemory])) : undefined;
    const gpus = free.map((ordinal) => ({ ordinal, freeMemory: memory?.get(ordinal) ?? 0 }));
    return chooseGpus(wanted, gpus, keptDatasetBytes(this.source!, this.spec!.precision)).map((g) => g.ordinal);
  }

  /** Where the rows the engine does not hold come from on every pass. */
  private fedFrom(): Exclude<FedFrom, 'file'> {
    const source = this.source;
    return source instanceof MemoryCachedRowSource ? 'memory' : source instanceof CachedRowSource ? 'disk' : 's3';
  }

  /** Rows by where they stay between passes, for the engine-open log. */
  private tierPlan(): RowsPerPass {
    const { residentRows, hostRows } = this.engine!.plan;
    return { resident: residentRows, host: hostRows, fed: this.source!.rows - residentRows - hostRows, fedFrom: this.fedFrom() };
  }

  /**
   * 4. The fit: after each iteration its Redis writes (fenced history entry + progress) go out beside the next pass,
   * and a checkpoint when the pacer says so; centroids.npy is staged beside the final assign pass.
   */
  async iterate(start: Start): Promise<{ result: KmeansResult; centroidsUpload?: Promise<OutputFile> }> {
    const { config, redis, keys } = this.deps;
    const spec = this.spec!;
    const engine = this.engine!;
    const source = this.source!;
    const saver = this.saver!;
    const store = this.store!;
    const { resume } = start;
    await this.progress(resume ? 'iterating' : 'initializing', resume?.iteration ?? 0, resume?.history);
    const pacer = new CheckpointPacer(spec.checkpointEvery, config.checkpointMinIntervalMs);
    const writer = { ...this.lock!, claim: store.requireClaim() };
    const iterationWrites = new IterationWrites();
    const outputs = (this.outputs = new OutputWriter({
      s3: this.deps.s3,
      output: spec.output,
      jobId: this.jobId,
      attempt: `c${store.claim}`,
      fence: () => store.assertOwner(),
      beginCommit: () => store.beginCommit(),
      // a cancel or a lost lock stops the uploads at once; a preemption lets them finish (the job is nearly done)
      signal: AbortSignal.any([...this.cancelSignals, ...(this.lockWatch ? [this.lockWatch.signal] : [])]),
      partBytes: config.uploadPartBytes,
    }));
    let centroidsUpload: Promise<OutputFile> | undefined;
    const result = await runKmeans({
      engine,
      source,
      spec: start.kmeansSpec,
      resume,
      initRows: start.initRows,
      preload: this.preload,
      onFirstPass: (held) => {
        if (!this.releaseMemoryAfterFirstPass || held < source.rows || !(source instanceof MemoryCachedRowSource)) return;
        this.log.info({ bytes: source.rows * source.rowBytes }, 'the engine holds every row: the memory cache of its download is given back');
        source.release().catch((err: unknown) => this.log.warn({ err }, 'memory cache release failed'));
      },
      signal: this.stop,
      log: this.log,
      onIteration: async (report, cp) => {
        const tb = performance.now();
        iterationSpan(report);
        this.deps.metrics?.iterationDone(report.ms, source.rows);
        await iterationWrites.next(async () => {
          const { iteration, inertia, reassigned, shift, ms } = report;
          const [written] = await Promise.all([
            appendIteration(redis, keys, this.jobId, { iteration, inertia, reassigned, shift, ms }, writer),
            this.progress('iterating', report.iteration, cp.history, cp.dataVariance),
          ]);
          // the job is gone from Redis (a restart without persistence) or another worker's: stop writing for it
          if (!written) throw new FencedError(this.jobId, 'lock-lost');
        });
        // on the cpu backend a save is written between iterations: beside a pass it only takes cores from the engine
        if (pacer.take(report.iteration)) await saver.submit(cp, engine.plan.backend !== 'cpu');
        this.log.info({ iteration: report.iteration, inertia: report.inertia, reassigned: report.reassigned, ms: Math.round(report.ms) }, 'iteration');
        this.timings.bookkeepingMs += performance.now() - tb;
      },
      // staged beside the final assign pass (which only labels rows); discard() waits for it if the run fails after all
      onFinalCentroids: (centroids) => {
        centroidsUpload = outputs.writeCentroids(centroids, spec.k, source.dims);
        centroidsUpload.catch(() => {}); // settled with the other uploads
      },
    });
    await Promise.all([saver.flush(), iterationWrites.flush()]);
    if (this.s3Source!.stats.bytes) this.deps.metrics?.s3BytesRead(this.s3Source!.stats.bytes);
    if (result.tiers.hostTierWarning) this.log.warn({ warning: result.tiers.hostTierWarning }, 'host tier not as planned');
    const { total, heldRowBytes } = result.tiers;
    this.deps.metrics?.tierBytes('resident', total.resident * heldRowBytes);
    this.deps.metrics?.tierBytes('host', total.host * heldRowBytes);
    this.deps.metrics?.tierBytes(this.fedFrom(), total.fed * source.rowBytes);
    return { result, centroidsUpload };
  }

  /** 5. The outputs staged (together: independent objects), then committed: summary.json last. */
  async finish(start: Start, result: KmeansResult, centroidsUpload?: Promise<OutputFile>): Promise<JobResult> {
    const { config } = this.deps;
    const spec = this.spec!;
    const engine = this.engine!;
    const source = this.source!;
    const outputs = this.outputs!;
    const saver = this.saver!;
    const s3Source = this.s3Source!;
    const writing = this.progress('writing', result.iterations, result.history);
    writing.catch(() => {}); // awaited after the uploads
    const tu = performance.now();
    // all settle before a failure is thrown, so that discard() sees every object that was written
    const uploads = await Promise.allSettled([
      centroidsUpload ?? outputs.writeCentroids(result.centroids, spec.k, source.dims),
      outputs.writeRows('assignments.npy', '<i4', source.rows, (f, n) => engine.labels(f, n)),
      config.writeDistances ? outputs.writeRows('distances.npy', '<f4', source.rows, (f, n) => engine.distances(f, n)) : undefined,
    ]);
    const failed = uploads.find((u) => u.status === 'rejected');
    if (failed) throw failed.reason;
    await writing;
    this.timings.uploadMs = performance.now() - tu;
    const jobResult = buildJobResult({
      jobId: this.jobId,
      attempt: this.attempt,
      spec,
      specHash: this.hash,
      dataset: { etag: s3Source.etag, rows: source.rows, dims: source.dims },
      plan: engine.plan,
      result,
      outputs,
      distances: config.writeDistances,
      timings: {
        totalMs: performance.now() - this.t0,
        openMs: this.timings.openMs,
        checkpointMs: saver.saveMs,
        checkpointWaitMs: saver.waitMs,
        bookkeepingMs: this.timings.bookkeepingMs,
        checkpoints: saver.saves,
        uploadMs: this.timings.uploadMs,
        s3BytesRead: s3Source.stats.bytes,
        s3Requests: s3Source.stats.requests,
        s3ReadMs: s3Source.stats.readMs,
      },
      resumedFromGeneration: start.resumedFromGeneration,
      initFrom: start.init?.from,
      startedAt: this.startedAt,
      finishedAt: Date.now(),
    });
    await phaseSpan('commit', () => outputs.commit(buildSummary(jobResult, result, this.attempt, source.rowBytes, this.fedFrom())));
    return jobResult;
  }

  /** 6. After the commit point: the model's history, the last progress, the checkpoints removed — together. */
  async record(jobResult: JobResult, result: KmeansResult): Promise<void> {
    const { config, redis, keys } = this.deps;
    const spec = this.spec!;
    await Promise.all([
      spec.name ? recordResult(redis, keys, spec.name, jobResult) : undefined,
      this.progress('done', result.iterations, result.history),
      config.keepCheckpoints ? undefined : this.store!.cleanup(),
    ]);
    this.outcome = 'completed';
    this.log.info({ iterations: result.iterations, inertia: result.inertia, stopReason: result.stopReason, ms: jobResult.timings.totalMs }, 'job completed');
  }

  /**
   * The error to fail the attempt with, once what this attempt staged is discarded, by outcome: the lock lost
   * (released, nothing written), cancelled (unrecoverable "cancelled"), preempted (checkpointed, back in the queue
   * without spending an attempt), fenced (released), a user problem (unrecoverable, no retry), anything else (retried).
   */
  async settle(err: unknown): Promise<unknown> {
    await this.saver?.flush().catch(() => {});
    await this.outputs?.discard();
    if (this.lockLost && !(err instanceof FencedError)) {
      this.outcome = 'released';
      this.log.warn('lost the job\'s lock (another worker may have it now); stopped without writing');
      return new FencedError(this.jobId, 'lock-lost');
    }
    const stopped = err instanceof CancelledBeforeCommitError || err instanceof KmeansAbortedError || (this.stop.aborted && !(err instanceof FencedError));
    if (stopped && (this.cancelled || err instanceof CancelledBeforeCommitError)) return this.settleCancelled();
    if (stopped && this.deps.preempt.aborted && this.token) return this.settlePreempted(err);
    if (err instanceof FencedError) {
      this.outcome = 'released';
      this.log.warn({ err: err.message }, 'lost the job to another worker; stopping without writing');
      return err;
    }
    const mapped = toJobError(err);
    if (mapped === err) {
      this.outcome = 'retried';
      this.log.error({ err }, 'job attempt failed');
      return err;
    }
    this.outcome = 'failed';
    this.log.warn({ problem: (mapped as Error).message }, 'job failed (not retried)');
    if (this.store?.claim !== undefined) await this.store.cleanup().catch(() => {}); // no retry will use them
    return mapped;
  }

  private async settleCancelled(): Promise<unknown> {
    this.outcome = 'cancelled';
    this.log.info('job cancelled');
    if (this.store?.claim !== undefined) await this.store.cleanup().catch(() => {});
    return toJobError(new JobInputError(CANCEL_REASON));
  }

  private async settlePreempted(err: unknown): Promise<unknown> {
    this.outcome = 'released';
    const cp = err instanceof KmeansAbortedError ? err.checkpoint : undefined;
    if (cp && this.saver) await this.saver.saveNow(cp);
    await this.job.moveToWait(this.token);
    this.log.info({ checkpoint: this.saver?.lastSaved ?? 0 }, 'preempted: checkpointed and handed the job back');
    return new WaitingError();
  }

  /** Always: stop watching, close the engine (after BullMQ recorded the job's end, where wired) and the source. */
  async release(): Promise<void> {
    this.cancelWatch.dispose();
    this.lockWatch?.dispose();
    this.preload?.stop(); // the source's close() waits for loads in flight
    const engine = this.engine;
    const devices = this.devices;
    const close = () => {
      try {
        engine?.close();
      } finally {
        this.deps.devices?.release(devices);
      }
    };
    if (this.deps.releases && engine) this.deps.releases.defer(this.jobId, close);
    else close();
    await this.source?.close().catch(() => {});
    const attempts = this.job.opts.attempts ?? 1;
    this.running?.end(this.outcome === 'retried' && this.attempt >= attempts ? 'failed' : this.outcome);
  }

  /** The job's progress; with the data's variance known (a checkpoint's), the ETA follows the observed convergence. */
  private async progress(phase: JobPhase, iteration: number, history: IterationReport[] = [], dataVariance = NaN): Promise<void> {
    const recent = history.slice(-5);
    const last = history[history.length - 1];
    const spec = this.spec;
    await this.job.updateProgress(
      makeProgress({
        phase,
        iteration,
        maxIter: spec?.maxIter ?? 0,
        rows: this.source?.rows,
        last: last && { iteration: last.iteration, inertia: last.inertia, reassigned: last.reassigned, shift: last.shift, ms: last.ms },
        msPerIteration: recent.length ? recent.reduce((s, h) => s + h.ms, 0) / recent.length : undefined,
        convergence: spec && { history, shiftStop: spec.tol * dataVariance, reassignedStop: spec.tolReassign },
        rowsPerPass: this.engine ? this.tierPlan() : undefined,
        settledFraction: last?.settledFraction,
      }),
    );
  }
}
