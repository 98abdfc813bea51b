/**
 * Limits that protect a worker from a spec it could never finish (or that would take a GPU pod down).
 * The producer refuses specs over a limit when enqueuing; the worker checks again with its own limits
 * (spec fields in parseJobSpec, dataset facts in checkDatasetLimits once the header is read).
 *
 * Configuration: environment variables, each a positive integer (underscores allowed: 1_000_000):
 *   KMFLEET_MAX_K                 default 1,000,000      clusters
 *   KMFLEET_MAX_DIMS              default 4,096          dimensions
 *   KMFLEET_MAX_ITER              default 10,000         iterations
 *   KMFLEET_MAX_ROWS              default 10,000,000,000 rows of the dataset
 *   KMFLEET_MAX_DATASET_BYTES     default 16 TiB         size of the dataset object
 *   KMFLEET_MAX_CENTROID_BYTES    default 8 GiB          k × dims × 4 (the fp32 centroid matrix a GPU must hold)
 *   KMFLEET_ALLOWED_BUCKETS       default: any           comma-separated buckets a spec may name (dataset, init,
 *                                                        output); the credentials may reach more than jobs should
 */
import { LimitsConfigError } from './errors/limits-config-error.js';

export interface Limits {
  maxK: number;
  maxDims: number;
  maxIter: number;
  maxRows: number;
  maxDatasetBytes: number;
  maxCentroidBytes: number;
  /** Buckets a spec may read from or write to; undefined = any bucket the credentials reach. */
  allowedBuckets?: readonly string[];
}

export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  maxK: 1_000_000,
  maxDims: 4096,
  maxIter: 10_000,
  maxRows: 10_000_000_000,
  maxDatasetBytes: 16 * 2 ** 40,
  maxCentroidBytes: 8 * 2 ** 30,
});

export const ALLOWED_BUCKETS_ENV = 'KMFLEET_ALLOWED_BUCKETS';

type NumericLimit = Exclude<keyof Limits, 'allowedBuckets'>;

export const LIMIT_ENV: Readonly<Record<NumericLimit, string>> = Object.freeze({
  maxK: 'KMFLEET_MAX_K',
  maxDims: 'KMFLEET_MAX_DIMS',
  maxIter: 'KMFLEET_MAX_ITER',
  maxRows: 'KMFLEET_MAX_ROWS',
  maxDatasetBytes: 'KMFLEET_MAX_DATASET_BYTES',
  maxCentroidBytes: 'KMFLEET_MAX_CENTROID_BYTES',
});

function positiveInt(value: unknown, what: string): number {
  const n = typeof value === 'string' ? Number(value.trim().replace(/_/g, '')) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1 || (typeof value === 'string' && !value.trim())) {
    throw new LimitsConfigError(`${what} must be a positive integer (got ${JSON.stringify(value)})`);
  }
  return n;
}

/** Defaults, overridden by the KMFLEET_MAX_* / KMFLEET_ALLOWED_BUCKETS variables of `env`, overridden by `overrides`. */
export function resolveLimits(overrides: Partial<Limits> = {}, env: NodeJS.ProcessEnv = process.env): Limits {
  const out: Limits = { ...DEFAULT_LIMITS };
  for (const key of Object.keys(LIMIT_ENV) as NumericLimit[]) {
    const raw = env[LIMIT_ENV[key]];
    if (raw !== undefined && raw !== '') out[key] = positiveInt(raw, LIMIT_ENV[key]);
    const o = overrides[key];
    if (o !== undefined) out[key] = positiveInt(o, `limits.${key}`);
  }
  const buckets = overrides.allowedBuckets ?? parseBucketList(env[ALLOWED_BUCKETS_ENV]);
  if (buckets !== undefined) out.allowedBuckets = Object.freeze([...buckets]);
  return out;
}

function parseBucketList(raw: string | undefined): string[] | undefined {
  if (raw === undefined || raw.trim() === '') return undefined;
  const list = raw.split(',').map((b) => b.trim()).filter(Boolean);
  const bad = list.filter((b) => !/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(b));
  if (bad.length > 0) throw new LimitsConfigError(`${ALLOWED_BUCKETS_ENV} holds names that are not S3 buckets: ${bad.join(', ')}`);
  return list;
}

/** What a worker learns from the dataset header (and HEAD) before it plans anything. */
export interface DatasetFacts {
  rows: number;
  dims: number;
  bytes: number;
}

/**
 * Problems of a dataset against the limits and the spec's k (rows < k cannot be clustered).
 * Returns messages (empty = fine); the worker fails the job without retries when there is any.
 */
export function checkDatasetLimits(facts: DatasetFacts, k: number, limits: Limits): string[] {
  const problems: string[] = [];
  if (facts.rows > limits.maxRows) problems.push(`dataset has ${facts.rows} rows, over the limit of ${limits.maxRows}`);
  if (facts.dims > limits.maxDims) problems.push(`dataset has ${facts.dims} dims, over the limit of ${limits.maxDims}`);
  if (facts.bytes > limits.maxDatasetBytes) {
    problems.push(`dataset is ${facts.bytes} bytes, over the limit of ${limits.maxDatasetBytes}`);
  }
  if (k * facts.dims * 4 > limits.maxCentroidBytes) {
    problems.push(`k × dims × 4 = ${k * facts.dims * 4} bytes of centroids, over the limit of ${limits.maxCentroidBytes}`);
  }
  if (facts.rows < k) problems.push(`dataset has ${facts.rows} rows, fewer than k = ${k}`);
  return problems;
}
