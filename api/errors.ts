/**
 * How failures become HTTP answers: one JSON body `{ error, issues? }` for all of them. Bad input is 400 with every bad
 * field named (the SDK's SpecValidationError, or the request's own schema), an unknown job 404, a down Redis 503;
 * anything else is 500 with a generic message (the details go to the log, not to the client).
 */
import { z } from 'zod';
import { KmfleetError } from '../errors/index.js';
import { KmfleetInputError, JobNotFoundError, RedisUnavailableError, SpecValidationError } from '../producer/errors/index.js';

/** A request the API answers with `statusCode` and this message (and the bad fields, for a 400). */
export class HttpError extends KmfleetError {
  readonly code = 'HTTP_ANSWER';
  constructor(
    readonly statusCode: number,
    message: string,
    readonly issues?: { path: string; message: string }[],
  ) {
    super(message);
  }
}

export interface ErrorAnswer {
  status: number;
  body: { error: string; issues?: { path: string; message: string }[] };
  /** log it: an error of ours, not the client's */
  internal: boolean;
}

/** A zod failure of a request part (body, query, path) → 400 naming each field. */
export function requestError(part: 'body' | 'query' | 'path', error: z.ZodError): HttpError {
  const issues = error.issues.map((i) => {
    if (i.code === 'unrecognized_keys') return { path: i.keys.join(', '), message: 'unknown field' };
    return { path: i.path.map(String).join('.'), message: i.message };
  });
  const list = issues.map((i) => `${i.path || `(${part})`}: ${i.message}`).join('; ');
  return new HttpError(400, `invalid request ${part}: ${list}`, issues);
}

export function toErrorAnswer(err: unknown): ErrorAnswer {
  if (err instanceof HttpError) return { status: err.statusCode, body: { error: err.message, ...(err.issues ? { issues: err.issues } : {}) }, internal: false };
  if (err instanceof SpecValidationError) return { status: 400, body: { error: err.message, issues: [...err.issues] }, internal: false };
  if (err instanceof KmfleetInputError) return { status: 400, body: { error: err.message }, internal: false };
  if (err instanceof JobNotFoundError) return { status: 404, body: { error: err.message }, internal: false };
  if (err instanceof RedisUnavailableError) return { status: 503, body: { error: err.message }, internal: false };
  // fastify's own request errors (bad JSON 400, wrong content type 415, body too large 413) carry their status
  const status = (err as { statusCode?: unknown })?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return { status, body: { error: (err as Error).message }, internal: false };
  }
  return { status: 500, body: { error: 'internal error (see the API server log)' }, internal: true };
}
