/**
 * The HTTP API's bodies and answers as zod schemas: the server validates requests and shapes every answer with them,
 * and api/openapi.ts turns the same schemas into the OpenAPI document. Answers are parsed through their schema before
 * they are sent (unknown fields are dropped), so what a client gets is what the document says, whatever the SDK adds.
 *
 * `apiSchemas(spec)` takes the schema of a job spec: the document passes the spec's zod schema (with the default
 * limits), the server passes `z.unknown()` and lets the SDK validate, so that a bad spec gets the SDK's error that
 * names every bad field, and a stored spec is never re-judged by this process's limits.
 */
import { z } from 'zod';
import { JOB_PHASES } from '../producer/progress.js';
import { MAX_PRIORITY } from '../producer/client-options.js';
import { DATASET_FORMATS, PRECISIONS } from '../producer/spec-vocabulary.js';

export const JOB_STATES = ['waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed', 'waiting-children', 'unknown'] as const;

/** Longest wait one long-poll request may ask for: proxies and load balancers close idle connections after about a minute. */
export const MAX_WAIT_MS = 55_000;
export const DEFAULT_WAIT_MS = 25_000;
/** Presigned output URLs: S3's own limit for SigV4 is 7 days. */
export const MAX_URL_EXPIRY_S = 7 * 24 * 3600;
export const DEFAULT_URL_EXPIRY_S = 3600;

const nullableNumber = z.number().nullable();
const ms = (description: string) => z.number().int().meta({ description });

/** Query values arrive as strings: integers in [min, max], absent → undefined. */
function intQuery(min: number, max: number, description: string) {
  return z
    .string()
    .regex(/^\d{1,16}$/, { error: `must be an integer from ${min} to ${max}` })
    .transform(Number)
    .pipe(z.number().int().min(min, { error: `must be an integer from ${min} to ${max}` }).max(max, { error: `must be an integer from ${min} to ${max}` }))
    .optional()
    .meta({ description });
}

/**
 * The schemas, with `spec` standing for a job spec. With `registry` (the document), each named schema is added to it
 * under its component name, so that the document refers to it instead of repeating it.
 */
export function apiSchemas(spec: z.ZodType, registry?: z.core.$ZodRegistry<{ id?: string }>) {
  const named = <T extends z.ZodType>(id: string, schema: T): T => (registry?.add(schema, { id }), schema);
  const ErrorBody = named('Error', z.object({
    error: z.string().meta({ description: 'what went wrong, in one line' }),
    issues: z
      .array(z.object({ path: z.string(), message: z.string() }))
      .optional()
      .meta({ description: 'for an invalid spec or request: every bad field (dotted path) and what is wrong with it' }),
  }));

  const JobProgress = named('JobProgress', z.object({
    phase: z.enum(JOB_PHASES),
    iteration: z.number().int().meta({ description: 'iterations completed (0 before the first)' }),
    maxIter: z.number().int(),
    inertia: nullableNumber.meta({ description: 'sum of squared distances to the nearest centroid after the last iteration' }),
    reassigned: nullableNumber.meta({ description: 'rows that changed cluster in the last iteration' }),
    reassignedFraction: nullableNumber.meta({ description: 'reassigned / rows (compared with spec.tolReassign)' }),
    shift: nullableNumber.meta({ description: 'sum of squared centroid shifts in the last iteration' }),
    settledFraction: nullableNumber.meta({ description: 'the share of rows the last iteration settled by their bounds, computing none of their distances' }),
    etaMs: nullableNumber.meta({ description: 'time left if every remaining iteration runs (an upper bound)' }),
    updatedAt: ms('ms since epoch of this report'),
    rowsPerPass: z
      .object({
        resident: z.number().int().meta({ description: 'rows kept on the device' }),
        host: z.number().int().meta({ description: "rows kept in the engine's host memory" }),
        fed: z.number().int().meta({ description: 'rows read again every pass, from fedFrom' }),
        fedFrom: z.enum(['memory', 'disk', 's3']),
      })
      .optional()
      .meta({ description: 'where each pass after the first takes its rows; absent until the engine is open' }),
  }));

  const JobOutputs = named('JobOutputs', z.object({
    prefix: z.string().meta({ description: '<output>/<jobId>' }),
    centroids: z.string().meta({ description: 's3:// URI of centroids.npy (float32 K×D)' }),
    assignments: z.string().meta({ description: 's3:// URI of assignments.npy (int32 N)' }),
    distances: z.string().optional().meta({ description: 's3:// URI of distances.npy (float32 N), when the worker writes it' }),
    summary: z.string().meta({ description: 's3:// URI of summary.json, written last (the commit point)' }),
  }));

  const JobResult = named('JobResult', z.object({
    jobId: z.string(),
    name: z.string().optional().meta({ description: 'model name (spec.name)' }),
    spec,
    specHash: z.string(),
    dataset: z.object({
      uri: z.string(),
      etag: z.string(),
      format: z.enum(DATASET_FORMATS),
      rows: z.number().int(),
      dims: z.number().int(),
    }),
    k: z.number().int(),
    iterations: z.number().int().meta({ description: 'iterations run (including any before a resume)' }),
    converged: z.boolean(),
    stopReason: z.enum(['tol', 'tolReassign', 'maxIter']),
    inertia: z.number().meta({ description: 'inertia of the final centroids (after the assign pass)' }),
    emptyClustersReseeded: z.number().int(),
    backend: z.string().meta({ description: "'cpu' | 'cuda' as run" }),
    device: z.string(),
    precision: z.enum(PRECISIONS.filter((p) => p !== 'auto') as [string, ...string[]]),
    outputs: JobOutputs,
    checksums: z.record(z.string(), z.string()).optional(),
    timings: z.record(z.string(), z.number()).meta({ description: 'phase → ms; totalMs always present' }),
    resumedFrom: z.object({ iteration: z.number().int(), generation: z.number().int() }).optional(),
    initFrom: z.string().optional(),
    startedAt: ms('ms since epoch'),
    finishedAt: ms('ms since epoch'),
  }));

  const JobInfo = named('JobInfo', z.object({
    id: z.string(),
    state: z.enum(JOB_STATES),
    progress: JobProgress.nullable(),
    result: JobResult.nullable().meta({ description: 'set when the job completed' }),
    failedReason: z.string().nullable().meta({ description: "why it failed ('cancelled' for a cancelled job)" }),
    attemptsMade: z.number().int(),
    cancelRequested: z.string().nullable().meta({ description: 'the cancel reason when a cancel was requested (the job may still be stopping)' }),
    spec: spec.nullable(),
    scheduler: z.string().nullable().meta({ description: 'the schedule that made the job, if any' }),
    timestamps: z.object({ createdAt: ms('ms since epoch'), startedAt: nullableNumber, finishedAt: nullableNumber }),
  }));

  const EnqueueRequest = named('EnqueueRequest', z.strictObject({
    spec,
    jobId: z.string().optional().meta({
      description: 'idempotency key, 1-128 characters [A-Za-z0-9._-], not only digits: enqueueing the same id again returns the existing job (default: a random UUID)',
    }),
    priority: z.number().int().min(0).max(MAX_PRIORITY).optional().meta({ description: `1 (highest) .. ${MAX_PRIORITY}; 0 or absent = none` }),
    delayMs: z.number().int().min(0).optional().meta({ description: 'start no earlier than this many ms from now' }),
  }));

  const JobHandle = named('JobHandle', z.object({
    id: z.string(),
    created: z.boolean().meta({ description: 'false when a job with this id already existed (nothing new was enqueued)' }),
    sameSpec: z.boolean().meta({ description: "whether the existing job's spec hash equals this request's (always true when created)" }),
    specHash: z.string(),
  }));

  const WaitResult = named('WaitResult', z.object({
    outcome: z.enum(['completed', 'failed', 'cancelled', 'pending']).meta({
      description: "'pending': the wait ended (timeout or newer progress) before the job did; ask again",
    }),
    job: JobInfo.nullable().meta({ description: 'the job now; null only for a job cancelled (and removed) before it started' }),
  }));

  const CancelResult = named('CancelResult', z.object({
    id: z.string(),
    outcome: z.enum(['removed', 'signalled', 'already-finished', 'not-found']).meta({
      description: "'removed': it had not started; 'signalled': its worker stops at the next chunk boundary",
    }),
    state: z.enum(JOB_STATES).nullable().meta({ description: 'the state seen before cancelling' }),
  }));

  const OutputLink = named('OutputLink', z.object({
    uri: z.string().meta({ description: 's3:// URI' }),
    url: z.string().meta({ description: "presigned GET URL (the S3 endpoint's scheme and host)" }),
  }));
  const OutputLinks = named('OutputLinks', z.object({
    jobId: z.string(),
    expiresInSeconds: z.number().int(),
    files: z.object({
      centroids: OutputLink,
      assignments: OutputLink,
      distances: OutputLink.optional(),
      summary: OutputLink,
    }),
  }));

  const RepeatInput = named('Repeat', z.strictObject({
    cron: z.string().optional().meta({ description: 'cron pattern, 5 fields (6 with seconds), e.g. "0 3 * * *"' }),
    every: z.number().int().min(1).optional().meta({ description: 'or: run every this many ms' }),
    tz: z.string().optional().meta({ description: 'IANA time zone of cron (default UTC)' }),
    limit: z.number().int().min(1).optional().meta({ description: 'stop after this many runs' }),
  }).meta({ description: 'exactly one of cron or every' }));

  const ScheduleRequest = named('ScheduleRequest', z.strictObject({
    repeat: RepeatInput,
    spec, // init defaults to 'previous' and name to the schedule name (documented on the route)
    priority: z.number().int().min(0).max(MAX_PRIORITY).optional(),
  }));

  const ScheduleInfo = named('ScheduleInfo', z.object({
    name: z.string(),
    cron: z.string().nullable(),
    every: nullableNumber,
    tz: z.string().nullable(),
    next: nullableNumber.meta({ description: 'next run, ms since epoch' }),
    iterationCount: nullableNumber.meta({ description: 'runs made so far' }),
    spec: spec.nullable(),
  }));

  const Health = named('Health', z.object({ status: z.enum(['ok', 'unavailable']), redis: z.string() }));

  const JobIdParams = z.object({ id: z.string().min(1).max(256).meta({ description: 'job id (URL-encoded: scheduler job ids hold ":")' }) });
  const NameParams = z.object({ name: z.string().min(1).max(128) });
  const WaitQuery = z.strictObject({
    timeoutMs: intQuery(0, MAX_WAIT_MS, `wait at most this long (default ${DEFAULT_WAIT_MS}, at most ${MAX_WAIT_MS})`),
    progressAfter: intQuery(0, Number.MAX_SAFE_INTEGER, "also return as soon as the job's progress.updatedAt is newer than this"),
  });
  const HistoryQuery = z.strictObject({ limit: intQuery(1, 1000, 'at most this many results (default 20)') });
  const OutputsQuery = z.strictObject({
    expiresIn: intQuery(1, MAX_URL_EXPIRY_S, `seconds the URLs stay valid (default ${DEFAULT_URL_EXPIRY_S})`),
  });

  return {
    ErrorBody, JobProgress, JobOutputs, JobResult, JobInfo, EnqueueRequest, JobHandle, WaitResult, CancelResult,
    OutputLinks, RepeatInput, ScheduleRequest, ScheduleInfo, Health, JobIdParams, NameParams, WaitQuery, HistoryQuery,
    OutputsQuery, Models: z.array(z.string()), Results: z.array(JobResult), Schedules: z.array(ScheduleInfo),
  };
}

export type ApiSchemas = ReturnType<typeof apiSchemas>;

/** The server's schemas: specs pass through to the SDK, which validates them with this process's limits. */
export const serverSchemas: ApiSchemas = apiSchemas(z.unknown());
