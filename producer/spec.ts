/**
 * Job spec v1: what a producer asks for and a worker runs. One zod schema, validated when a job is
 * enqueued and again when a worker takes it (`parseJobSpec`); every bad field is named in ONE error.
 *
 * Fields and defaults (a missing optional field gets its default; the parsed spec is always complete):
 *   version          1 (default 1). Specs are strict: unknown fields are errors, so a typo never goes unnoticed.
 *   dataset.uri      s3://bucket/key of the data: N rows × D dims.                               required
 *                    (every s3:// URI here: no '.', '..' or empty key segments, no backslash, no %-escapes of them;
 *                    producer/s3-uri.ts)
 *   dataset.format   npy (float32/float16 .npy, C order) | npz (np.savez, a stored member) | parquet (a list<float>
 *                    column, one embedding a row) | arrow (Arrow IPC file or stream, a FixedSizeList or List of
 *                    float column) | fvecs | bvecs
 *                    (the ANN benchmarks' records; bvecs read as float32) | f32 | f16 (raw little-endian rows). default npy
 *   dataset.dims     D; required for raw formats (no header); for the others, if given, must match the file.
 *   dataset.convert  'f64-to-f32': also accept float64 values, rounded to float32 as read (npy, npz, parquet, arrow). optional
 *   dataset.member   npz: the array to read (default: the only one, or arr_0).                  optional
 *   dataset.column   parquet, arrow: the column of embeddings (default: the only column).       optional
 *   k                number of clusters, 1..limits.maxK.                                         required
 *   metric           l2 | cosine (spherical k-means: rows normalized, centroids renormalized).   default l2
 *   init             kmeans++ | random | previous | s3://bucket/key.npy (K×D float32 centroids).  default kmeans++
 *                    `previous` = centroids of the latest result of model `name` (warm start; scheduled jobs
 *                    use it); if the model has no result yet the worker falls back to kmeans++ with `seed`.
 *   maxIter          1..limits.maxIter.                                                          default 300
 *   tol              sklearn's meaning: stop when the sum over centroids of the squared centroid shift
 *                    is <= tol × (mean per-dimension variance of the data). 0 = only on no movement. default 1e-4
 *   tolReassign      kmcuda's meaning: stop when the fraction of rows that changed cluster in an
 *                    iteration is <= tolReassign (0..1). 0 = only when no row moves.             default 0
 *   seed             0..2^32-1: k-means++ / random init and empty-cluster re-seeding.            default 0
 *   precision        auto | fp32 | tf32 | bf16 | fp16 (auto: the worker picks; fp32 = exact labels). default auto
 *   output           s3://bucket[/prefix]; outputs go under <output>/<jobId>/ (normalized: no trailing '/'). required
 *   name             model name [a-zA-Z0-9._-]{1,128}: result history, `latest`, warm starts. required for init=previous
 *   checkpointEvery  write a checkpoint every N iterations; 0 = never.                            default 1
 *   backend          auto | cpu | cuda.                                                           default auto
 *   gpus             GPUs of the worker this job runs on, its rows split between them (the same bits as on one):
 *                    1..64, all, or auto (as many as hold the rows on their devices). Capped by the worker's free
 *                    GPUs.                                                       default: the worker's (KMFLEET_GPUS_PER_JOB)
 *
 * Limits (producer/limits.ts, env KMFLEET_MAX_*): k, dims, maxIter and k×dims×4 centroid bytes are checked
 * here; rows and dataset bytes are only known to the worker (checkDatasetLimits).
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { SpecValidationError, type SpecIssue } from './errors/spec-validation-error.js';
import { ALLOWED_BUCKETS_ENV, resolveLimits, type Limits, LIMIT_ENV } from './limits.js';
import { parseS3ObjectUri, parseS3PrefixUri, s3UriProblem, type S3UriKind } from './s3-uri.js';

import {
  BACKENDS,
  DATASET_CONVERSIONS,
  GPU_WORDS,
  MAX_GPUS,
  DATASET_FORMATS,
  INIT_METHODS,
  MAX_SEED,
  METRICS,
  MODEL_NAME_RE,
  PRECISIONS,
  SPEC_DEFAULTS,
  SPEC_VERSION,
  type Backend,
  type DatasetConversion,
  type DatasetFormat,
  type Gpus,
  type Init,
  type Metric,
  type Precision,
} from './spec-vocabulary.js';

export * from './spec-vocabulary.js';

export interface DatasetRef {
  uri: string;
  format: DatasetFormat;
  dims?: number;
  convert?: DatasetConversion;
  member?: string;
  column?: string;
}

/** A validated spec, every default filled in. This is what job.data.spec holds. */
export interface JobSpec {
  version: typeof SPEC_VERSION;
  dataset: DatasetRef;
  k: number;
  metric: Metric;
  init: Init;
  maxIter: number;
  tol: number;
  tolReassign: number;
  seed: number;
  precision: Precision;
  output: string;
  name?: string;
  checkpointEvery: number;
  backend: Backend;
  gpus?: Gpus;
}

/** What a producer may pass: the same fields, the defaulted ones optional. */
export interface JobSpecInput {
  version?: number;
  dataset: { uri: string; format?: DatasetFormat; dims?: number; convert?: DatasetConversion; member?: string; column?: string };
  k: number;
  metric?: Metric;
  init?: Init | string;
  maxIter?: number;
  tol?: number;
  tolReassign?: number;
  seed?: number;
  precision?: Precision;
  output: string;
  name?: string;
  checkpointEvery?: number;
  backend?: Backend;
  gpus?: Gpus;
}

const FIELD_ORDER = [
  'version', 'dataset', 'k', 'metric', 'init', 'maxIter', 'tol', 'tolReassign', 'seed',
  'precision', 'output', 'name', 'checkpointEvery', 'backend', 'gpus',
];

const GPUS_ERROR = `must be an integer from 1 to ${MAX_GPUS}, ${GPU_WORDS.join(' or ')}`;

const oneOf = (values: readonly string[]) => `must be one of ${values.join(', ')}`;

function int(min: number, max: number, hint = '') {
  const error = `must be an integer from ${min} to ${max}${hint}`;
  return z.number({ error }).int({ error }).min(min, { error }).max(max, { error });
}

function num(min: number, max?: number) {
  const error = max === undefined ? `must be a finite number >= ${min}` : `must be a number from ${min} to ${max}`;
  const n = z.number({ error }).min(min, { error });
  return max === undefined ? n : n.max(max, { error });
}

function count(min: number) {
  const error = `must be an integer >= ${min}`;
  return z.number({ error }).int({ error }).min(min, { error });
}

function choice<T extends readonly [string, ...string[]]>(values: T) {
  return z.enum(values, { error: oneOf(values) });
}

/** The zod schema for the given limits (limits vary per process, so the schema is built per call site). */
export function jobSpecSchema(limits: Limits) {
  const dataset = z.strictObject(
    {
      uri: z.string({ error: 'must be an s3://bucket/key URI' }).superRefine(s3Uri('object')),
      format: choice(DATASET_FORMATS).default(SPEC_DEFAULTS.format),
      dims: int(1, limits.maxDims, ` (limit ${LIMIT_ENV.maxDims})`).optional(),
      convert: choice(DATASET_CONVERSIONS).optional(),
      member: z.string({ error: 'must be the name of an array in the .npz' }).min(1, { error: 'must be the name of an array in the .npz' }).max(255).optional(),
      column: z.string({ error: 'must be the name of a column of the Parquet or Arrow file' }).min(1, { error: 'must be the name of a column of the Parquet or Arrow file' }).max(255).optional(),
    },
    { error: 'must be an object { uri, format?, dims?, convert?, member?, column? }' },
  );
  const initError = 'must be kmeans++, random, previous or an s3://bucket/key.npy URI of centroids';
  const init = z.string({ error: initError }).superRefine((v, ctx) => {
    if ((INIT_METHODS as readonly string[]).includes(v)) return;
    // an s3:// URI with a bad part says which part; anything else gets the list of what init may be
    const problem = v.startsWith('s3://') ? s3UriProblem(v, 'object') : initError;
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem === FORM_OBJECT ? initError : problem });
    else if (!v.endsWith('.npy')) ctx.addIssue({ code: 'custom', message: initError });
  });
  return z.strictObject(
    {
      version: z.literal(SPEC_VERSION, { error: `must be ${SPEC_VERSION} (this worker/producer speaks spec v1)` })
        .default(SPEC_VERSION),
      dataset,
      k: int(1, limits.maxK, ` (limit ${LIMIT_ENV.maxK})`),
      metric: choice(METRICS).default(SPEC_DEFAULTS.metric),
      init: init.default(SPEC_DEFAULTS.init),
      maxIter: int(1, limits.maxIter, ` (limit ${LIMIT_ENV.maxIter})`).default(SPEC_DEFAULTS.maxIter),
      tol: num(0).default(SPEC_DEFAULTS.tol),
      tolReassign: num(0, 1).default(SPEC_DEFAULTS.tolReassign),
      seed: int(0, MAX_SEED).default(SPEC_DEFAULTS.seed),
      precision: choice(PRECISIONS).default(SPEC_DEFAULTS.precision),
      output: z
        .string({ error: 'must be an s3://bucket[/prefix] URI' })
        .superRefine(s3Uri('prefix'))
        .transform((v) => v.replace(/\/$/, '')),
      name: z
        .string({ error: 'must be a model name of 1-128 characters [a-zA-Z0-9._-]' })
        .regex(MODEL_NAME_RE, { error: 'must be a model name of 1-128 characters [a-zA-Z0-9._-]' })
        .optional(),
      checkpointEvery: count(0).default(SPEC_DEFAULTS.checkpointEvery),
      backend: choice(BACKENDS).default(SPEC_DEFAULTS.backend),
      gpus: z.union([int(1, MAX_GPUS, `, ${GPU_WORDS.join(' or ')}`), choice(GPU_WORDS)], { error: GPUS_ERROR }).optional(),
    },
    { error: 'must be a JSON object' },
  );
}

const FORM_OBJECT = s3UriProblem('', 'object');

/** A zod check that names what is wrong with an s3:// URI (the bucket, a '..' segment, ...), not only its form. */
function s3Uri(kind: S3UriKind) {
  return (v: string, ctx: z.RefinementCtx) => {
    const problem = s3UriProblem(v, kind);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
  };
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v = input;
  for (const p of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[p];
  }
  return v;
}

function show(v: unknown): string {
  let s: string;
  if (typeof v === 'number' && !Number.isFinite(v)) s = String(v);
  else {
    try {
      s = JSON.stringify(v) ?? String(v);
    } catch {
      s = String(v);
    }
  }
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

const normalizeName = (s: string) => s.toLowerCase().replace(/[^a-z0-9]/g, '');

function unknownFieldMessage(key: string, known: readonly string[]): string {
  const near = known.find((k) => normalizeName(k) === normalizeName(key));
  return near ? `unknown field (did you mean ${near}?)` : `unknown field (known: ${known.join(', ')})`;
}

const DATASET_FIELDS = ['uri', 'format', 'dims', 'convert', 'member', 'column'];

function toIssues(error: z.ZodError, input: unknown): SpecIssue[] {
  const out: SpecIssue[] = [];
  for (const issue of error.issues) {
    const path = issue.path.map(String).join('.');
    if (issue.code === 'unrecognized_keys') {
      const known = issue.path.length === 0 ? FIELD_ORDER : DATASET_FIELDS;
      for (const key of issue.keys) {
        out.push({ path: path ? `${path}.${key}` : key, message: unknownFieldMessage(key, known) });
      }
      continue;
    }
    const value = valueAt(input, issue.path);
    if (value === undefined && issue.path.length > 0) out.push({ path, message: `is required; ${issue.message}` });
    else out.push({ path, message: `${issue.message} (got ${show(value)})` });
  }
  return out;
}

/** Checks across fields, on the raw input, for the fields that are individually well-typed. */
function crossFieldIssues(input: Record<string, unknown>, limits: Limits): SpecIssue[] {
  const out: SpecIssue[] = [];
  const ds = input.dataset as Record<string, unknown> | undefined;
  const format = ds && typeof ds === 'object' ? (ds.format ?? SPEC_DEFAULTS.format) : undefined;
  const dims = ds && typeof ds === 'object' ? ds.dims : undefined;
  if ((format === 'f32' || format === 'f16') && dims === undefined) {
    out.push({ path: 'dataset.dims', message: `is required for raw format ${format} (the file has no header)` });
  }
  if (format !== 'npy' && format !== 'npz' && format !== 'parquet' && format !== 'arrow' && ds?.convert !== undefined) {
    out.push({ path: 'dataset.convert', message: `applies to npy, npz, parquet and arrow datasets only (format ${format} is read as it is)` });
  }
  if (format !== 'parquet' && format !== 'arrow' && ds?.column !== undefined) {
    out.push({ path: 'dataset.column', message: `applies to parquet and arrow datasets only (format is ${format})` });
  }
  if (format !== 'npz' && ds?.member !== undefined) {
    out.push({ path: 'dataset.member', message: `applies to npz datasets only (format is ${format})` });
  }
  if (input.init === 'previous' && input.name === undefined) {
    out.push({ path: 'name', message: 'is required when init is "previous" (warm start from the model\'s latest result)' });
  }
  out.push(...bucketIssues(input, limits));
  const k = input.k;
  if (
    typeof k === 'number' && Number.isSafeInteger(k) && k >= 1 && k <= limits.maxK &&
    typeof dims === 'number' && Number.isSafeInteger(dims) && dims >= 1 && dims <= limits.maxDims &&
    k * dims * 4 > limits.maxCentroidBytes
  ) {
    out.push({
      path: 'k',
      message: `k × dataset.dims × 4 = ${k * dims * 4} bytes of centroids, over the limit of ${limits.maxCentroidBytes} (${LIMIT_ENV.maxCentroidBytes})`,
    });
  }
  return out;
}

/** Buckets outside KMFLEET_ALLOWED_BUCKETS, for the URIs that are otherwise well-formed. */
function bucketIssues(input: Record<string, unknown>, limits: Limits): SpecIssue[] {
  const allowed = limits.allowedBuckets;
  if (!allowed) return [];
  const ds = input.dataset as Record<string, unknown> | undefined;
  const uris: [string, unknown, (u: string) => { bucket: string } | null][] = [
    ['dataset.uri', ds && typeof ds === 'object' ? ds.uri : undefined, parseS3ObjectUri],
    ['init', input.init, parseS3ObjectUri],
    ['output', input.output, parseS3PrefixUri],
  ];
  const out: SpecIssue[] = [];
  for (const [path, uri, parse] of uris) {
    const loc = typeof uri === 'string' ? parse(uri) : null;
    if (loc && !allowed.includes(loc.bucket)) {
      out.push({ path, message: `bucket '${loc.bucket}' is not allowed here (${ALLOWED_BUCKETS_ENV}: ${allowed.join(', ')})` });
    }
  }
  return out;
}

function order(path: string): number {
  const i = FIELD_ORDER.indexOf(path.split('.')[0]);
  return i < 0 ? FIELD_ORDER.length : i;
}

/**
 * Validates a spec and fills in defaults. Throws SpecValidationError naming every bad field.
 * `limits` defaults to resolveLimits() (defaults + KMFLEET_MAX_* env).
 */
export function parseJobSpec(input: unknown, limits: Limits = resolveLimits()): JobSpec {
  const result = jobSpecSchema(limits).safeParse(input);
  const issues = result.success ? [] : toIssues(result.error, input);
  if (input !== null && typeof input === 'object' && !Array.isArray(input)) {
    for (const extra of crossFieldIssues(input as Record<string, unknown>, limits)) {
      if (!issues.some((i) => i.path === extra.path)) issues.push(extra);
    }
  }
  if (issues.length > 0) {
    issues.sort((a, b) => order(a.path) - order(b.path));
    throw new SpecValidationError(issues);
  }
  return result.data as JobSpec;
}

/** JSON with object keys sorted at every level and undefined dropped: equal specs give equal strings. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite number');
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/**
 * Fields that do NOT change the centroids after iteration i, so a checkpoint stays valid across them:
 * where outputs go, the model name, how often to checkpoint, how many iterations at most, and on how many GPUs.
 */
export const SPEC_HASH_EXCLUDES = ['output', 'name', 'checkpointEvery', 'maxIter', 'gpus'] as const;

/**
 * Stable hash for checkpoint matching: sha256 (hex) of the canonical JSON of the normalized spec without
 * SPEC_HASH_EXCLUDES. Pass a parsed spec (defaults filled), so `{k:8}` and `{k:8, metric:'l2'}` agree.
 */
export function specHash(spec: JobSpec): string {
  const rest: Record<string, unknown> = { ...spec };
  for (const f of SPEC_HASH_EXCLUDES) delete rest[f];
  return createHash('sha256').update(canonicalJson(rest)).digest('hex');
}
