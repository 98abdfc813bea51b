/**
 * The words of job spec v1 — allowed values, their types, the defaults — without the validator, so that
 * light consumers (CLI help texts, type imports) need not load zod. The schema is in spec.ts.
 */
export const SPEC_VERSION = 1 as const;
export const DATASET_FORMATS = ['npy', 'npz', 'parquet', 'arrow', 'fvecs', 'bvecs', 'f32', 'f16'] as const;
/** Opt-in conversions of a dataset as it is read: a float64 .npy (numpy's default) rounded to float32. */
export const DATASET_CONVERSIONS = ['f64-to-f32'] as const;
export const METRICS = ['l2', 'cosine'] as const;
export const INIT_METHODS = ['kmeans++', 'random', 'previous'] as const;
export const PRECISIONS = ['auto', 'fp32', 'tf32', 'bf16', 'fp16'] as const;
export const BACKENDS = ['auto', 'cpu', 'cuda'] as const;
/** GPUs of one job, beside a count: every GPU of the worker, or as many as hold the rows (core/gpu-count.ts). */
export const GPU_WORDS = ['all', 'auto'] as const;
export const MAX_GPUS = 64;
export const MODEL_NAME_RE = /^[a-zA-Z0-9._-]{1,128}$/;
export const MAX_SEED = 2 ** 32 - 1;

export type DatasetFormat = (typeof DATASET_FORMATS)[number];
export type DatasetConversion = (typeof DATASET_CONVERSIONS)[number];
export type Metric = (typeof METRICS)[number];
export type InitMethod = (typeof INIT_METHODS)[number];
/** An init method, or the s3:// URI of a .npy of K×D float32 centroids. */
export type Init = InitMethod | `s3://${string}`;
export type Precision = (typeof PRECISIONS)[number];
export type Backend = (typeof BACKENDS)[number];
/** How many GPUs of its worker one job runs on: a count, 'all' or 'auto'. */
export type Gpus = number | (typeof GPU_WORDS)[number];

export const SPEC_DEFAULTS = Object.freeze({
  version: SPEC_VERSION,
  format: 'npy' as DatasetFormat,
  metric: 'l2' as Metric,
  init: 'kmeans++' as Init,
  maxIter: 300,
  tol: 1e-4,
  tolReassign: 0,
  seed: 0,
  precision: 'auto' as Precision,
  checkpointEvery: 1,
  backend: 'auto' as Backend,
});
