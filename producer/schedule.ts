/**
 * Recurring jobs: a BullMQ job scheduler per schedule name (`queue.upsertJobScheduler`). Each firing
 * makes a job `repeat:<name>:<millis>` whose data is the template's JobData (with `scheduler: name`).
 */
import type { JobSchedulerJson, RepeatOptions } from 'bullmq';
import { parseDuration } from './duration.js';
import { ArgumentError } from './errors/job-errors.js';
import type { JobData } from './job-data.js';
import type { JobSpec } from './spec.js';

/** Exactly one of `cron` (5 or 6 fields, with optional `tz`) or `every` (ms, or a duration: "15m", "1h"). */
export interface RepeatInput {
  cron?: string;
  every?: number | string;
  tz?: string;
  /** Stop after this many runs. */
  limit?: number;
}

export interface ScheduleInfo {
  name: string;
  cron: string | null;
  every: number | null;
  tz: string | null;
  /** Next run (ms since epoch), if known. */
  next: number | null;
  /** Runs made so far. */
  iterationCount: number | null;
  spec: JobSpec | null;
}

export function parseRepeat(r: RepeatInput): Omit<RepeatOptions, 'key'> {
  const hasCron = r.cron !== undefined && r.cron !== '';
  const hasEvery = r.every !== undefined;
  if (hasCron === hasEvery) throw new ArgumentError('a schedule needs exactly one of cron or every');
  if (r.tz !== undefined) {
    if (!hasCron) throw new ArgumentError('tz applies to cron schedules only');
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: r.tz });
    } catch {
      throw new ArgumentError(`unknown time zone ${JSON.stringify(r.tz)} (use an IANA name such as Europe/Berlin)`);
    }
  }
  if (r.limit !== undefined && !(Number.isSafeInteger(r.limit) && r.limit >= 1)) {
    throw new ArgumentError(`limit must be a positive integer (got ${r.limit})`);
  }
  const limit = r.limit !== undefined ? { limit: r.limit } : {};
  if (hasEvery) return { every: parseDuration(r.every as number | string, 'every'), ...limit };
  const fields = (r.cron as string).trim().split(/\s+/);
  if (fields.length < 5 || fields.length > 6) {
    throw new ArgumentError(`cron ${JSON.stringify(r.cron)} must have 5 fields (or 6 with seconds)`);
  }
  return { pattern: fields.join(' '), ...(r.tz ? { tz: r.tz } : {}), ...limit };
}

/** Scheduled runs warm-start by default: init 'previous' and name = schedule name unless given. */
export function normalizeScheduleSpec(name: string, input: unknown): unknown {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) return input;
  const spec = { ...(input as Record<string, unknown>) };
  if (spec.init === undefined) spec.init = 'previous';
  if (spec.name === undefined) spec.name = name;
  return spec;
}

export function toScheduleInfo(s: JobSchedulerJson<JobData>): ScheduleInfo {
  return {
    name: s.id ?? s.key,
    cron: s.pattern ?? null,
    every: s.every !== undefined && s.every !== null ? Number(s.every) : null,
    tz: s.tz ?? null,
    next: s.next ?? null,
    iterationCount: s.iterationCount ?? null,
    spec: s.template?.data?.spec ?? null,
  };
}
