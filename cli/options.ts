/**
 * The CLI's option vocabulary: value parsers and the option groups that several commands share. Every invocation
 * loads this (through cli/commands/index.ts, `--help` included), so it imports only commander and the producer's
 * constants; what a command does lives in its own module, loaded when it runs.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { DEFAULT_PREFIX, DEFAULT_QUEUE } from '../producer/keys.js';
import { DATASET_FORMATS, SPEC_DEFAULTS } from '../producer/spec-vocabulary.js';

export const positiveInt = (name: string) => (v: string): number => {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive integer`);
  return n;
};

export const nonNegativeInt = (name: string) => (v: string): number => {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n)) throw new InvalidArgumentError(`${name} must be a non-negative integer`);
  return n;
};

export const nonNegativeNumber = (name: string, max = Infinity) => (v: string): number => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0 || n > max) throw new InvalidArgumentError(`${name} must be a number in [0, ${max}]`);
  return n;
};

export const msOption = (name: string) => (v: string): number => {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive integer of ms`);
  return n;
};

export interface ConnectionFlags {
  redisUrl?: string;
  prefix?: string;
  queue?: string;
  json?: boolean;
}

const REDIS_URL_HELP = 'redis:// or rediss:// URL (default: $REDIS_URL, else redis://127.0.0.1:6379)';
const PREFIX_HELP = `Redis key prefix (default: $KMFLEET_PREFIX, else ${DEFAULT_PREFIX})`;
const QUEUE_HELP = `queue name (default: $KMFLEET_QUEUE, else ${DEFAULT_QUEUE})`;

/** --redis-url, --prefix and --queue on the program itself, so that they may come before the command's name. */
export function addGlobalConnectionOptions(program: Command): Command {
  return program.option('--redis-url <url>', REDIS_URL_HELP).option('--prefix <prefix>', PREFIX_HELP).option('--queue <name>', QUEUE_HELP);
}

/** --redis-url, --prefix, --queue and --json, on a queue command. */
export function addConnectionOptions(cmd: Command): Command {
  return cmd
    .option('--redis-url <url>', REDIS_URL_HELP)
    .option('--prefix <prefix>', PREFIX_HELP)
    .option('--queue <name>', QUEUE_HELP)
    .option('--json', 'machine-readable output: one JSON document on stdout');
}

export interface SpecFlags {
  spec?: string;
  dataset?: string;
  format?: string;
  dims?: string;
  convert?: string;
  member?: string;
  column?: string;
  k?: string;
  metric?: string;
  init?: string;
  maxIter?: string;
  tol?: string;
  tolReassign?: string;
  seed?: string;
  precision?: string;
  output?: string;
  name?: string;
  checkpointEvery?: string;
  backend?: string;
  gpus?: string;
}

/**
 * The job spec flags of `enqueue` and `schedule`. Values stay strings: the spec validator names every bad field.
 * Defaults are the schema's; `initDefault` documents a different one.
 */
export function addSpecOptions(cmd: Command, initDefault: string = SPEC_DEFAULTS.init): Command {
  return cmd
    .option('--spec <file.json>', 'read the spec from a JSON file (flags override its fields)')
    .option('--dataset <uri>', 'dataset: s3://bucket/key')
    .option('--format <f>', `${DATASET_FORMATS.join(' | ')} (default ${SPEC_DEFAULTS.format})`)
    .option('--dims <d>', 'dimensions (required for raw f32/f16)')
    .option('--convert <c>', 'f64-to-f32: also accept float64 values (.npy, .npz, a Parquet or Arrow column), rounded to float32 as they are read')
    .option('--member <name>', 'npz: the array to read (default: the only one, or arr_0)')
    .option('--column <name>', 'parquet, arrow: the column of embeddings (default: the only column)')
    .option('--k <n>', 'number of clusters')
    .option('--metric <m>', `l2 | cosine (default ${SPEC_DEFAULTS.metric})`)
    .option('--init <init>', `kmeans++ | random | previous | s3://bucket/centroids.npy (default ${initDefault})`)
    .option('--max-iter <n>', `iterations at most (default ${SPEC_DEFAULTS.maxIter})`)
    .option('--tol <x>', `stop when Σ‖Δc‖² ≤ tol × mean feature variance (sklearn; default ${SPEC_DEFAULTS.tol})`)
    .option('--tol-reassign <x>', `stop when the fraction of rows that changed cluster ≤ x (kmcuda; default ${SPEC_DEFAULTS.tolReassign})`)
    .option('--seed <n>', `seed (default ${SPEC_DEFAULTS.seed})`)
    .option('--precision <p>', `auto | fp32 | tf32 | bf16 | fp16 (default ${SPEC_DEFAULTS.precision})`)
    .option('--output <uri>', 'output prefix: s3://bucket[/prefix]; outputs go under <output>/<jobId>/')
    .option('--name <name>', 'model name [a-zA-Z0-9._-]: result history and warm starts (init previous)')
    .option('--checkpoint-every <n>', `checkpoint every n iterations, 0 = never (default ${SPEC_DEFAULTS.checkpointEvery})`)
    .option('--backend <b>', `auto | cpu | cuda (default ${SPEC_DEFAULTS.backend})`)
    .option('--gpus <n>', "GPUs of its worker the job runs on: a count, all, or auto (default: the worker's KMFLEET_GPUS_PER_JOB)");
}
