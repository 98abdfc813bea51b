/**
 * Every route of the HTTP API, declared once: the server (api/server.ts) registers these and validates with their
 * schemas, the OpenAPI document (api/openapi.ts) is generated from them. Schemas are named by their key in
 * api/schemas.ts. Paths are written the OpenAPI way (`{id}`).
 */
import type { ApiSchemas } from './schemas.js';

export type SchemaName = keyof ApiSchemas;

export interface RouteResponse {
  description: string;
  /** JSON body; absent = no body (or `contentType` says what instead) */
  schema?: SchemaName;
  contentType?: string;
}

export interface RouteDef {
  operationId: string;
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  summary: string;
  description?: string;
  tag: 'jobs' | 'models' | 'schedules' | 'service';
  /** needs the bearer token (when the server has one) */
  auth: boolean;
  params?: SchemaName;
  query?: SchemaName;
  body?: SchemaName;
  responses: Record<number, RouteResponse>;
}

const notFound: RouteResponse = { description: 'no such job', schema: 'ErrorBody' };
const badRequest: RouteResponse = { description: 'invalid request: `issues` names every bad field', schema: 'ErrorBody' };

export const ROUTES: readonly RouteDef[] = [
  {
    operationId: 'enqueueJob', method: 'POST', path: '/v1/jobs', tag: 'jobs', auth: true, body: 'EnqueueRequest',
    summary: 'Validate a job spec and enqueue it (idempotent by jobId)',
    responses: {
      201: { description: 'enqueued', schema: 'JobHandle' },
      200: { description: 'a job with this jobId existed already; nothing new was enqueued (see sameSpec)', schema: 'JobHandle' },
      400: badRequest,
    },
  },
  {
    operationId: 'getJob', method: 'GET', path: '/v1/jobs/{id}', tag: 'jobs', auth: true, params: 'JobIdParams',
    summary: 'State, progress, result or failure of a job',
    responses: { 200: { description: 'the job', schema: 'JobInfo' }, 404: notFound },
  },
  {
    operationId: 'waitJob', method: 'GET', path: '/v1/jobs/{id}/wait', tag: 'jobs', auth: true, params: 'JobIdParams', query: 'WaitQuery',
    summary: 'Long-poll: answer when the job ends, its progress is newer than progressAfter, or timeoutMs passed',
    description:
      "Loop on it: pass the last answer's job.progress.updatedAt as progressAfter to get each new progress report, " +
      "until outcome is no longer 'pending'.",
    responses: { 200: { description: 'the outcome so far and the job', schema: 'WaitResult' }, 400: badRequest, 404: notFound },
  },
  {
    operationId: 'jobEvents', method: 'GET', path: '/v1/jobs/{id}/events', tag: 'jobs', auth: true, params: 'JobIdParams',
    summary: 'Server-sent events: progress until the job ends',
    description:
      'A text/event-stream. Events: `progress` (data: {state, progress: JobProgress|null}) at once and on every change; then one of ' +
      '`completed` (data: JobResult), `failed` (data: {reason, attemptsMade}), `cancelled` (data: {id}) or `error` ' +
      '(data: Error), after which the server closes the stream. Comment lines (`: ping`) keep idle connections open.',
    responses: { 200: { description: 'the event stream', contentType: 'text/event-stream' }, 404: notFound },
  },
  {
    operationId: 'cancelJob', method: 'POST', path: '/v1/jobs/{id}/cancel', tag: 'jobs', auth: true, params: 'JobIdParams',
    summary: 'Cancel a job: removed if it has not started, else its worker stops at the next chunk boundary',
    responses: { 200: { description: 'what happened (outcome not-found for an unknown job)', schema: 'CancelResult' } },
  },
  {
    operationId: 'jobOutputs', method: 'GET', path: '/v1/jobs/{id}/outputs', tag: 'jobs', auth: true, params: 'JobIdParams', query: 'OutputsQuery',
    summary: "Presigned GET URLs of a completed job's outputs (centroids.npy, assignments.npy, summary.json)",
    responses: {
      200: { description: 'the URLs', schema: 'OutputLinks' },
      404: notFound,
      409: { description: 'the job has not completed', schema: 'ErrorBody' },
    },
  },
  {
    operationId: 'listModels', method: 'GET', path: '/v1/models', tag: 'models', auth: true,
    summary: 'Model names that have results',
    responses: { 200: { description: 'names, sorted', schema: 'Models' } },
  },
  {
    operationId: 'modelHistory', method: 'GET', path: '/v1/models/{name}/history', tag: 'models', auth: true, params: 'NameParams', query: 'HistoryQuery',
    summary: "A model's results, newest first",
    responses: { 200: { description: 'results', schema: 'Results' }, 400: badRequest },
  },
  {
    operationId: 'modelLatest', method: 'GET', path: '/v1/models/{name}/latest', tag: 'models', auth: true, params: 'NameParams',
    summary: "A model's newest result",
    responses: { 200: { description: 'the result', schema: 'JobResult' }, 404: { description: 'the model has no result', schema: 'ErrorBody' } },
  },
  {
    operationId: 'listSchedules', method: 'GET', path: '/v1/schedules', tag: 'schedules', auth: true,
    summary: 'The recurring jobs',
    responses: { 200: { description: 'schedules, by name', schema: 'Schedules' } },
  },
  {
    operationId: 'putSchedule', method: 'PUT', path: '/v1/schedules/{name}', tag: 'schedules', auth: true, params: 'NameParams', body: 'ScheduleRequest',
    summary: 'Create or replace a recurring job',
    description: "The spec's init defaults to 'previous' and its name to the schedule name: each run warm-starts from the last.",
    responses: { 200: { description: 'the schedule', schema: 'ScheduleInfo' }, 400: badRequest },
  },
  {
    operationId: 'deleteSchedule', method: 'DELETE', path: '/v1/schedules/{name}', tag: 'schedules', auth: true, params: 'NameParams',
    summary: 'Remove a recurring job (jobs it already made are not touched)',
    responses: { 204: { description: 'removed' }, 404: { description: 'no such schedule', schema: 'ErrorBody' } },
  },
  {
    operationId: 'health', method: 'GET', path: '/healthz', tag: 'service', auth: false,
    summary: 'Liveness and Redis reachability (no token needed)',
    responses: { 200: { description: 'Redis answers', schema: 'Health' }, 503: { description: 'Redis does not answer', schema: 'Health' } },
  },
  {
    operationId: 'openapi', method: 'GET', path: '/openapi.json', tag: 'service', auth: false,
    summary: 'This document (no token needed)',
    responses: { 200: { description: 'OpenAPI 3.1', contentType: 'application/json' } },
  },
];

/** `/v1/jobs/{id}` → `/v1/jobs/:id` (fastify's form). */
export function fastifyPath(path: string): string {
  return path.replace(/\{(\w+)\}/g, ':$1');
}
