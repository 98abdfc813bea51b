/**
 * How many GPUs one job runs on (spec.gpus, KMFLEET_GPUS_PER_JOB, `kmfleet fit --gpus`): a count, every free GPU, or
 * 'auto' — the fewest that hold the dataset on their devices, so that a job streams from the host only when all of
 * them together could not hold it. The result never changes the bits (the engine's exact statistics), only the time.
 */
import { KmfleetInputError } from '../errors/index.js';

/** A count, every free GPU, or as many as hold the rows: the values of the job spec's `gpus`. */
export type GpuCount = number | 'all' | 'auto';
const MAX_GPUS = 64;

/** A GPU free for the job: its CUDA ordinal and the device memory free on it now. */
export interface FreeGpu {
  ordinal: number;
  freeMemory: number;
}

/** The share of a device's free memory that 'auto' counts on for rows: the rest is centroids, chunk slots, scratch. */
const ROWS_SHARE = 0.8;

/**
 * The bytes of a dataset's rows as the engine keeps them, for 'auto': an fp16 or bf16 job over f32 rows keeps them in
 * that type (native/src/row_narrowing.h), half the file's bytes; any other job keeps the file's.
 */
export function keptDatasetBytes(source: { rows: number; rowBytes: number; dtype: string }, precision: string | undefined): number {
  const narrowed = source.dtype === 'f32' && (precision === 'fp16' || precision === 'bf16');
  return source.rows * (narrowed ? source.rowBytes / 2 : source.rowBytes);
}

/** '2', 'all' or 'auto' as a Gpus value; `what` names the setting in the error. */
export function parseGpus(text: string, what: string): GpuCount {
  const t = text.trim();
  if (t === 'all' || t === 'auto') return t;
  const n = Number(t);
  if (/^\d+$/.test(t) && n >= 1 && n <= MAX_GPUS) return n;
  throw new KmfleetInputError(`${what} must be an integer from 1 to ${MAX_GPUS}, all or auto; got '${text}'`);
}

/**
 * The GPUs a job takes of `free` (in the order given): `wanted` of them at most, at least one when any is free.
 * datasetBytes: the rows as the engine keeps them (rows × row bytes), for 'auto'.
 */
export function chooseGpus(wanted: GpuCount, free: readonly FreeGpu[], datasetBytes: number): FreeGpu[] {
  if (free.length === 0) return [];
  if (wanted === 'all') return [...free];
  if (wanted !== 'auto') return free.slice(0, Math.max(1, Math.min(wanted, free.length)));
  let held = 0;
  for (let i = 0; i < free.length; i++) {
    held += free[i]!.freeMemory * ROWS_SHARE;
    if (held >= datasetBytes) return free.slice(0, i + 1);
  }
  return [...free];
}
