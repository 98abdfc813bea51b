/**
 * `kmfleet enqueue`: validate a job spec (from flags, a JSON file, or both — flags win) and put it on the queue.
 * Every spec field has a flag; values go to the spec validator as given, so one error lists every bad field.
 *
 *   kmfleet enqueue --dataset s3://data/emb.npy --k 64 --output s3://models/emb --name emb --job-id emb-2026-11-22 --wait
 */
import { readFile } from 'node:fs/promises';
import { KmfleetInputError } from '../../errors/index.js';
import type { ConnectionFlags, SpecFlags } from '../options.js';
import { cliAction, printJson, withClient } from './connection.js';
import { formatResult } from './status.js';
import { followJob } from './wait.js';

/** "64" → 64, "1e-4" → 0.0001; anything else stays a string, so the validator names it with the value given. */
function numeric(v: string): number | string {
  return /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(v.trim()) ? Number(v) : v;
}

/** The spec object from --spec (if any) and the flags; validation is the SDK's. */
export async function specFromFlags(flags: SpecFlags): Promise<Record<string, unknown>> {
  let spec: Record<string, unknown> = {};
  if (flags.spec) {
    const text = await readFile(flags.spec, 'utf8');
    try {
      spec = JSON.parse(text);
    } catch (e) {
      throw new KmfleetInputError(`spec file ${flags.spec} is not valid JSON: ${(e as Error).message}`);
    }
    if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) {
      throw new KmfleetInputError(`spec file ${flags.spec} must hold a JSON object`);
    }
  }
  const out: Record<string, unknown> = { ...spec };
  const fromFlags: Record<string, unknown> = {};
  if (flags.dataset !== undefined) fromFlags.uri = flags.dataset;
  if (flags.format !== undefined) fromFlags.format = flags.format;
  if (flags.dims !== undefined) fromFlags.dims = numeric(flags.dims);
  if (flags.convert !== undefined) fromFlags.convert = flags.convert;
  if (flags.member !== undefined) fromFlags.member = flags.member;
  if (flags.column !== undefined) fromFlags.column = flags.column;
  if (Object.keys(fromFlags).length > 0) {
    const base = spec.dataset && typeof spec.dataset === 'object' && !Array.isArray(spec.dataset) ? spec.dataset : {};
    out.dataset = { ...base, ...fromFlags };
  }
  const strings = ['metric', 'init', 'precision', 'output', 'name', 'backend'] as const;
  const numbers = ['k', 'maxIter', 'tol', 'tolReassign', 'seed', 'checkpointEvery'] as const;
  for (const f of strings) if (flags[f] !== undefined) out[f] = flags[f];
  for (const f of numbers) if (flags[f] !== undefined) out[f] = numeric(flags[f] as string);
  if (flags.gpus !== undefined) out.gpus = numeric(flags.gpus);
  return out;
}

interface EnqueueFlags extends SpecFlags, ConnectionFlags {
  jobId?: string;
  priority?: string;
  wait?: boolean;
  timeout?: number;
}

export const action = cliAction(async (flags: EnqueueFlags) => {
  const spec = await specFromFlags(flags);
  await withClient(flags, async (c) => {
    const priority = flags.priority === undefined ? undefined : (numeric(flags.priority) as number);
    const handle = await c.enqueue(spec, { jobId: flags.jobId, priority });
    if (!handle.created && !handle.sameSpec) {
      process.stderr.write(`kmfleet: warning: job ${handle.id} already exists with a DIFFERENT spec; the existing job stands\n`);
    }
    if (!flags.wait) {
      if (flags.json) printJson(handle);
      else process.stdout.write(handle.created ? `enqueued job ${handle.id}\n` : `job ${handle.id} already exists (not enqueued again)\n`);
      return;
    }
    if (!flags.json) process.stderr.write(handle.created ? `enqueued job ${handle.id}\n` : `job ${handle.id} already exists; waiting for it\n`);
    const result = await followJob(c, handle.id, flags);
    if (flags.json) printJson({ ...handle, result });
    else process.stdout.write(`job ${handle.id}: completed\n` + formatResult(result));
  });
});
