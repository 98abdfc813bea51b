/**
 * What each route of api/routes.ts does, by operationId: a call of the producer SDK (KmfleetClient) — the API adds no
 * job logic of its own. Inputs arrive validated by the route's schemas; answers are shaped by them in api/server.ts.
 * (The event stream, jobEvents, writes its own answer: api/job-events.ts.)
 */
import type { KmfleetClient } from '../producer/client.js';
import type { S3Handle } from '../worker/s3/client.js';
import { HttpError } from './errors.js';
import { waitForJob } from './job-wait.js';
import { presignOutputs } from './output-links.js';
import { DEFAULT_URL_EXPIRY_S, DEFAULT_WAIT_MS } from './schemas.js';

export interface HandlerContext {
  client: KmfleetClient;
  /** signs output URLs; without it /outputs answers 503 */
  s3?: S3Handle;
  openapi: () => unknown;
}

/* eslint-disable @typescript-eslint/no-explicit-any -- inputs are the route schemas' parsed output */
export interface HandlerInput {
  params: any;
  query: any;
  body: any;
  /** aborts when the client goes away */
  signal: AbortSignal;
}

export interface HandlerOutput {
  status: number;
  body?: unknown;
}

export type Handler = (input: HandlerInput) => Promise<HandlerOutput>;

const ok = (body: unknown): HandlerOutput => ({ status: 200, body });

async function jobOrNotFound(client: KmfleetClient, id: string) {
  const job = await client.get(id);
  if (!job) throw new HttpError(404, `job ${id} not found`);
  return job;
}

export function makeHandlers(ctx: HandlerContext): Record<string, Handler> {
  const { client } = ctx;
  return {
    async enqueueJob({ body }) {
      const handle = await client.enqueue(body.spec, { jobId: body.jobId, priority: body.priority, delayMs: body.delayMs });
      return { status: handle.created ? 201 : 200, body: handle };
    },
    async getJob({ params }) {
      return ok(await jobOrNotFound(client, params.id));
    },
    async waitJob({ params, query, signal }) {
      return ok(await waitForJob(client, params.id, { timeoutMs: query.timeoutMs ?? DEFAULT_WAIT_MS, progressAfter: query.progressAfter, signal }));
    },
    async cancelJob({ params }) {
      return ok(await client.cancel(params.id));
    },
    async jobOutputs({ params, query }) {
      const job = await jobOrNotFound(client, params.id);
      if (job.state !== 'completed' || !job.result) throw new HttpError(409, `job ${params.id} has not completed (state ${job.state})`);
      if (!ctx.s3) throw new HttpError(503, 'this API server has no S3 settings to sign output URLs with');
      return ok(await presignOutputs(ctx.s3, params.id, job.result.outputs, query.expiresIn ?? DEFAULT_URL_EXPIRY_S));
    },
    async listModels() {
      return ok(await client.models());
    },
    async modelHistory({ params, query }) {
      return ok(await client.history(params.name, { limit: query.limit ?? 20 }));
    },
    async modelLatest({ params }) {
      const latest = await client.latest(params.name);
      if (!latest) throw new HttpError(404, `model ${params.name} has no result`);
      return ok(latest);
    },
    async listSchedules() {
      return ok(await client.schedules());
    },
    async putSchedule({ params, body }) {
      return ok(await client.schedule(params.name, body.repeat, body.spec, { priority: body.priority }));
    },
    async deleteSchedule({ params }) {
      if (!(await client.unschedule(params.name))) throw new HttpError(404, `schedule ${params.name} not found`);
      return { status: 204 };
    },
    async health() {
      try {
        await (await client.connection()).ping();
        return ok({ status: 'ok', redis: client.where });
      } catch {
        return { status: 503, body: { status: 'unavailable', redis: client.where } };
      }
    },
    async openapi() {
      return ok(ctx.openapi());
    },
  };
}
