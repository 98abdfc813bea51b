/**
 * The worker's configuration, from the environment only (12-factor: the same image runs everywhere).
 * Every variable the worker reads is in this table (docs/operations.md has the operator's version); the S3 client only
 * sets one of the SDK's own switches (its Node-version notice, see worker/s3/client.ts).
 *
 * | variable                         | default                  | meaning                                                          |
 * |----------------------------------|--------------------------|------------------------------------------------------------------|
 * | REDIS_URL                        | redis://127.0.0.1:6379   | redis[s]://[user:pass@]host:port[/db] (producer/connection.ts)   |
 * | REDIS_CLUSTER_NODES              | (one node)               | host:port,… of a Redis Cluster (producer/redis-cluster.ts)       |
 * | KMFLEET_PREFIX                   | kmfleet                  | key prefix, hash-tagged {prefix} (producer/keys.ts)              |
 * | KMFLEET_QUEUE                    | jobs                     | BullMQ queue name                                                |
 * | KMFLEET_CONCURRENCY              | GPUs ÷ GPUs per job, ≥ 1 | jobs at once in this process                                     |
 * | KMFLEET_GPUS_PER_JOB             | 1                        | GPUs of a job whose spec says none: a count, all, or auto (as    |
 * |                                  |                          | many as hold its rows on their devices); the same bits any way   |
 * | KMFLEET_BACKEND                  | (spec's)                 | force cpu or cuda for every job, overriding spec.backend=auto    |
 * | KMFLEET_THREADS                  | all cores                | CPU threads of the cpu backend                                   |
 * | KMFLEET_CHUNK_ROWS               | planner                  | rows per engine host buffer (fixes the chunk size: bitwise runs) |
 * | KMFLEET_GPU_MEMORY               | device's free memory     | device memory a job may take in all, e.g. 60G; 0: no rows kept   |
 * |                                  |                          | on the device (the CPU backend: memory for its resident rows)    |
 * | KMFLEET_HOST_MEMORY              | available − max(⅕, 2 GiB)| host memory for the rows past those (the host tier), e.g. 200G;  |
 * |                                  |                          | 0 = none: they are read again every pass                         |
 * | KMFLEET_CACHE_DIR                | (off)                    | local dataset cache directory (the pod's NVMe)                   |
 * | KMFLEET_CACHE_MAX_GB             | (no limit)               | keep the cache under this size: least recently used files go     |
 * | KMFLEET_MEMORY_CACHE_MB          | 1024                     | datasets up to this size are held in host memory for the job     |
 * | KMFLEET_WRITE_DISTANCES          | false                    | also write distances.npy                                         |
 * | KMFLEET_KEEP_CHECKPOINTS         | false                    | keep _checkpoints/ after a job completed                         |
 * | KMFLEET_CHECKPOINT_MIN_INTERVAL_MS | 1000                   | at least this long between checkpoints (checkpoints/pacer.ts)    |
 * | KMFLEET_S3_ENDPOINT              | (AWS)                    | MinIO / s3rver endpoint; implies path-style                      |
 * | KMFLEET_S3_FORCE_PATH_STYLE      | true with an endpoint    | path-style addressing                                            |
 * | KMFLEET_S3_COMPAT                | none                     | 's3rver': its workarounds (checksums WHEN_REQUIRED, abort 405)   |
 * | KMFLEET_S3_MAX_ATTEMPTS          | 8                        | SDK attempts per request (backoff + jitter)                      |
 * | KMFLEET_S3_MAX_SOCKETS           | 64                       | sockets per S3 client                                            |
 * | KMFLEET_S3_REQUEST_TIMEOUT_MS    | 120000                   | socket inactivity timeout per request                            |
 * | KMFLEET_S3_DIRECT_READS          | 1                        | ranged GETs to an http:// endpoint land in place (0: SDK client) |
 * | KMFLEET_S3_READ_PART_MB          | 16                       | bytes per ranged GET (8–64 recommended); memory-cache block      |
 * | KMFLEET_S3_READ_CONCURRENCY      | 8                        | ranged GETs in flight per chunk                                  |
 * | KMFLEET_S3_UPLOAD_PART_MB        | 8                        | multipart part size (≥ 5)                                        |
 * | KMFLEET_LOCK_DURATION_MS         | 30000                    | BullMQ lock; a killed worker's job comes back after about this   |
 * | KMFLEET_STALLED_INTERVAL_MS      | 30000                    | how often workers look for stalled jobs                          |
 * | KMFLEET_MAX_STALLED_COUNT        | 3                        | worker deaths a job survives before it fails                     |
 * | KMFLEET_SHUTDOWN_GRACE_MS        | 25000                    | SIGTERM → exit within this (k8s grace is 30 s by default)        |
 * | KMFLEET_CANCEL_POLL_MS           | 250                      | cancel flag poll, behind pub/sub                                 |
 * | KMFLEET_METRICS_PORT             | 9464                     | /metrics /healthz /readyz; 0 = off                               |
 * | KMFLEET_LOG_LEVEL                | info                     | pino level                                                       |
 * | KMFLEET_MAX_*                    | producer/limits.ts       | spec and dataset limits, re-checked by the worker                |
 * | KMFLEET_ALLOWED_BUCKETS          | producer/limits.ts       | buckets a spec may name (default any), re-checked by the worker  |
 * | AWS_REGION, AWS_ACCESS_KEY_ID, … | AWS standard chain       | S3 credentials and region                                        |
 */
import { cpus } from 'node:os';
import { KmfleetInputError } from '../errors/index.js';
import { connectionFromEnv, type RedisConnectionOptions } from '../producer/connection.js';
import { DEFAULT_PREFIX, DEFAULT_QUEUE } from '../producer/keys.js';
import { resolveLimits, type Limits } from '../producer/limits.js';
import { parseByteSize, parseGpus, type GpuCount } from '../core/index.js';
import { s3SettingsFromEnv, type S3Settings } from './s3/client.js';

export interface WorkerConfig {
  redis: RedisConnectionOptions;
  prefix: string;
  queue: string;
  /** undefined: the GPUs found over gpusPerJob (1 when all or auto), at least 1 */
  concurrency?: number;
  /** GPUs of a job whose spec gives no `gpus` (core/gpu-count.ts) */
  gpusPerJob: GpuCount;
  backend?: 'cpu' | 'cuda';
  threads?: number;
  chunkRows?: number;
  /** bytes for the rows the engine keeps across passes: device memory on CUDA (EngineOptions.memoryBudget) */
  gpuMemoryBytes?: number;
  /** bytes of host memory for the engine's host tier (EngineOptions.hostMemoryBudget) */
  hostMemoryBytes?: number;
  cacheDir?: string;
  /** KMFLEET_CACHE_MAX_GB in bytes; undefined: the cache is not evicted */
  cacheMaxBytes?: number;
  memoryCacheBytes: number;
  writeDistances: boolean;
  keepCheckpoints: boolean;
  /** ms at least between two periodic checkpoints of a job (worker/checkpoints/pacer.ts); 0 = every checkpointEvery */
  checkpointMinIntervalMs: number;
  s3: S3Settings;
  readPartBytes: number;
  readConcurrency: number;
  uploadPartBytes: number;
  lockDurationMs: number;
  stalledIntervalMs: number;
  maxStalledCount: number;
  shutdownGraceMs: number;
  cancelPollMs: number;
  metricsPort: number;
  logLevel: string;
  limits: Limits;
}

export class WorkerConfigError extends KmfleetInputError {
  override readonly code = 'WORKER_CONFIG';
}

const MB = 1024 * 1024;
const GB = 1024 * MB;

/**
 * KMFLEET_MEMORY_CACHE_MB's default. Datasets up to this size stay in host memory after their first read (k-means++'s
 * uniform sample reads every block of the dataset before the first pass: without a memory cache or KMFLEET_CACHE_DIR
 * the dataset is downloaded twice); with KMFLEET_CACHE_DIR they are also written to the pod's cache file from there
 * (dataset/cache-filler.ts), unless the file is there already. A host with memory to spare may raise it; 0 turns it
 * off.
 */
export const MEMORY_CACHE_BYTES = 1024 * MB;

/** See worker/checkpoints/pacer.ts: what a crash may lose, traded against checkpoints' share of fast runs. */
export const DEFAULT_CHECKPOINT_MIN_INTERVAL_MS = 1000;

export function loadWorkerConfig(env: NodeJS.ProcessEnv = process.env): WorkerConfig {
  const problems: string[] = [];
  const int = (name: string, min: number, fallback?: number): number | undefined => {
    const v = env[name];
    if (v === undefined || v === '') return fallback;
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) {
      problems.push(`${name} must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
      return fallback;
    }
    return n;
  };
  const bool = (name: string): boolean => {
    const v = (env[name] ?? '').toLowerCase();
    if (v === '' || v === '0' || v === 'false' || v === 'no') return false;
    if (v === '1' || v === 'true' || v === 'yes') return true;
    problems.push(`${name} must be true or false, got ${JSON.stringify(env[name])}`);
    return false;
  };
  const backend = env.KMFLEET_BACKEND || undefined;
  if (backend !== undefined && backend !== 'cpu' && backend !== 'cuda' && backend !== 'auto') {
    problems.push(`KMFLEET_BACKEND must be cpu, cuda or auto, got ${JSON.stringify(backend)}`);
  }
  let s3: S3Settings = {};
  try {
    s3 = s3SettingsFromEnv(env);
  } catch (err) {
    problems.push((err as Error).message);
  }
  let redis: RedisConnectionOptions = { host: '127.0.0.1', port: 6379 };
  try {
    redis = connectionFromEnv(env);
  } catch (err) {
    problems.push((err as Error).message);
  }
  let limits: Limits | undefined;
  try {
    limits = resolveLimits({}, env);
  } catch (err) {
    problems.push((err as Error).message);
  }
  const size = (name: string): number | undefined => {
    const v = env[name];
    if (v === undefined || v === '') return undefined;
    try {
      return parseByteSize(v, name);
    } catch (err) {
      problems.push((err as Error).message);
      return undefined;
    }
  };
  const gpus = (name: string): GpuCount => {
    const v = env[name];
    if (v === undefined || v === '') return 1;
    try {
      return parseGpus(v, name);
    } catch (err) {
      problems.push((err as Error).message);
      return 1;
    }
  };
  const cacheMaxGb = int('KMFLEET_CACHE_MAX_GB', 1);
  const config: WorkerConfig = {
    redis,
    prefix: env.KMFLEET_PREFIX || DEFAULT_PREFIX,
    queue: env.KMFLEET_QUEUE || DEFAULT_QUEUE,
    concurrency: int('KMFLEET_CONCURRENCY', 1),
    gpusPerJob: gpus('KMFLEET_GPUS_PER_JOB'),
    backend: backend === 'cpu' || backend === 'cuda' ? backend : undefined,
    threads: int('KMFLEET_THREADS', 1),
    chunkRows: int('KMFLEET_CHUNK_ROWS', 1),
    gpuMemoryBytes: size('KMFLEET_GPU_MEMORY'),
    hostMemoryBytes: size('KMFLEET_HOST_MEMORY'),
    cacheDir: env.KMFLEET_CACHE_DIR || undefined,
    cacheMaxBytes: cacheMaxGb === undefined ? undefined : cacheMaxGb * GB,
    memoryCacheBytes: int('KMFLEET_MEMORY_CACHE_MB', 0, MEMORY_CACHE_BYTES / MB)! * MB,
    writeDistances: bool('KMFLEET_WRITE_DISTANCES'),
    keepCheckpoints: bool('KMFLEET_KEEP_CHECKPOINTS'),
    checkpointMinIntervalMs: int('KMFLEET_CHECKPOINT_MIN_INTERVAL_MS', 0, DEFAULT_CHECKPOINT_MIN_INTERVAL_MS)!,
    s3,
    readPartBytes: int('KMFLEET_S3_READ_PART_MB', 1, 16)! * MB,
    readConcurrency: int('KMFLEET_S3_READ_CONCURRENCY', 1, 8)!,
    uploadPartBytes: int('KMFLEET_S3_UPLOAD_PART_MB', 5, 8)! * MB,
    lockDurationMs: int('KMFLEET_LOCK_DURATION_MS', 1000, 30_000)!,
    stalledIntervalMs: int('KMFLEET_STALLED_INTERVAL_MS', 100, 30_000)!,
    maxStalledCount: int('KMFLEET_MAX_STALLED_COUNT', 0, 3)!,
    shutdownGraceMs: int('KMFLEET_SHUTDOWN_GRACE_MS', 100, 25_000)!,
    cancelPollMs: int('KMFLEET_CANCEL_POLL_MS', 10, 250)!,
    metricsPort: int('KMFLEET_METRICS_PORT', 0, 9464)!,
    logLevel: env.KMFLEET_LOG_LEVEL || 'info',
    limits: limits ?? resolveLimits({}, {}),
  };
  if (problems.length > 0) throw new WorkerConfigError(`invalid worker configuration:\n  ${problems.join('\n  ')}`);
  return config;
}

/** CPU count, for messages and the default thread count. */
export function cpuCount(): number {
  return cpus().length;
}
