/**
 * Step 2 of a job (DESIGN.md, "The path of one job"): claim the job's writes, check the output bucket, open the
 * dataset and start its download, write the 'opening' progress.
 *
 * These are independent round trips, all in flight together. The download starts as soon as the dataset's header is
 * read: it only reads, so it waits neither for the claim (which fences writes) nor for the bucket check (on s3rver a
 * bucket HEAD lists the bucket). When several fail, the error thrown is the first of claim, bucket, dataset (a typo in
 * `output` is named before anything about the dataset), then progress. On failure nothing stays open or downloading.
 */
import { hostMemory } from '../native/index.js';
import type { JobSpec } from '../producer/spec.js';
import { checkDatasetLimits } from '../producer/limits.js';
import type { CheckpointStore } from './checkpoints/store.js';
import type { WorkerConfig } from './config.js';
import { CachedRowSource } from './dataset/cache.js';
import { fillCacheFromMemory } from './dataset/cache-filler.js';
import { MemoryCachedRowSource } from './dataset/memory-cache.js';
import type { RowSource } from '../core/index.js';
import { S3RowSource } from './dataset/s3-source.js';
import { JobInputError } from './failures.js';
import type { Logger } from './logger.js';
import type { S3Handle } from './s3/client.js';
import { assertBucketExists } from './s3/objects.js';
import { parseS3UriOf } from './s3/uri.js';

export interface OpenJobOptions {
  s3: S3Handle;
  spec: JobSpec;
  config: WorkerConfig;
  store: CheckpointStore;
  /** the 'opening' progress write */
  progress: () => Promise<void>;
  /** the job's stop (cancel, preemption, lock loss): ends waits for blocks still downloading */
  stop: AbortSignal;
  log: Logger;
}

export interface OpenedJob {
  /** the dataset on S3 (size, ETag, read counters) */
  s3Source: S3RowSource;
  /** what the engine reads: the memory cache, the local cache, or s3Source itself */
  source: RowSource;
  /**
   * The memory cache holds a dataset past its size limit for this job's k-means++ sample: give it back once the
   * engine holds every row (MemoryCachedRowSource.release)
   */
  releaseMemoryAfterFirstPass: boolean;
}

export async function openJob(o: OpenJobOptions): Promise<OpenedJob> {
  const { s3, spec, config } = o;
  const claiming = settle(o.store.claimJob());
  const bucketCheck = settle(assertBucketExists(s3, parseS3UriOf('output', spec.output).bucket));
  const progressed = settle(o.progress());
  const opened = await settle(
    S3RowSource.open(s3, spec.dataset.uri, {
      format: spec.dataset.format,
      dims: spec.dataset.dims,
      convert: spec.dataset.convert,
      member: spec.dataset.member,
      column: spec.dataset.column,
      partBytes: config.readPartBytes,
      concurrency: config.readConcurrency,
      // no signal: a stop takes effect at the next chunk boundary (the driver cancels the engine), so reads in flight
      // finish and the last completed iteration's checkpoint is still in hand
    }),
  );
  if (opened.status === 'rejected') {
    await throwFirstFailure([claiming, bucketCheck]);
    throw opened.reason;
  }
  const s3Source = opened.value;
  let source: RowSource = s3Source;
  try {
    const problems = checkDatasetLimits({ rows: s3Source.rows, dims: s3Source.dims, bytes: s3Source.size }, spec.k, config.limits);
    if (problems.length > 0) {
      await throwFirstFailure([claiming, bucketCheck]);
      throw new JobInputError(`dataset ${spec.dataset.uri} cannot be used: ${problems.join('; ')}`);
    }
    const cacheOff = (err: unknown) => o.log.warn({ err }, 'dataset cache off for this job');
    const cacheOptions = {
      maxBytes: config.cacheMaxBytes,
      onEvict: (paths: string[]) => o.log.info({ evicted: paths }, 'dataset cache: least recently used files removed to make room'),
    };
    const bytes = s3Source.rows * s3Source.rowBytes;
    const fitsMemory = bytes <= config.memoryCacheBytes;
    // k-means++'s sample reads nearly every block before the first pass reads them all again. Without a cache
    // directory, a dataset the host can hold twice over (this download, and the engine's host tier that the first
    // pass fills from it) is downloaded once into memory for the job and given back after that pass: S3 is read once.
    const forSample = !fitsMemory && !config.cacheDir && spec.init === 'kmeans++' && 2 * bytes <= hostMemory().available;
    // a dataset the pod has cached already is read from its file; else one that fits the memory cache downloads into
    // it (and, with a cache directory, is written to the file beside the job: cache-filler.ts); a larger one goes
    // through the file as it is read (CachedRowSource)
    const warm = config.cacheDir ? await CachedRowSource.openComplete(s3Source, config.cacheDir, cacheOff) : undefined;
    if (warm) {
      source = warm;
    } else if (fitsMemory || forSample) {
      const memory = new MemoryCachedRowSource(s3Source, { blockBytes: config.readPartBytes, concurrency: config.readConcurrency, signal: o.stop });
      memory.prefetch();
      source = memory;
      if (config.cacheDir) await fillCacheFromMemory(memory, s3Source, config.cacheDir, { ...cacheOptions, onError: cacheOff });
    } else if (config.cacheDir) {
      source = await CachedRowSource.startFilling(s3Source, config.cacheDir, cacheOff, cacheOptions);
    }
    await throwFirstFailure([claiming, bucketCheck, progressed]);
    return { s3Source, source, releaseMemoryAfterFirstPass: forSample && source instanceof MemoryCachedRowSource };
  } catch (err) {
    // the caller never gets the source: stop the download here (the memory cache's buffer goes back to the pool)
    await source.close().catch(() => {});
    throw err;
  }
}

/** A promise's outcome, never rejecting: for round trips started together whose errors are named in a fixed order. */
function settle<T>(p: Promise<T>): Promise<PromiseSettledResult<T>> {
  return p.then(
    (value) => ({ status: 'fulfilled', value }),
    (reason: unknown) => ({ status: 'rejected', reason }),
  );
}

/** Waits for each in turn and throws the first one's error, if any failed. */
async function throwFirstFailure(results: Promise<PromiseSettledResult<unknown>>[]): Promise<void> {
  for (const r of results) {
    const s = await r;
    if (s.status === 'rejected') throw s.reason;
  }
}
