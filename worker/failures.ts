/**
 * Which failures are the user's (a bad spec or dataset: fail at once, no retry, a message that names the problem —
 * DESIGN.md, Faults) and which are the fleet's (Redis, S3 outages, a device error: BullMQ retries with backoff).
 */
import { UnrecoverableError } from 'bullmq';
import { InvalidArgumentError, NonFiniteInputError } from '../native/index.js';
import { SpecValidationError } from '../producer/errors/spec-validation-error.js';
import { DatasetFormatError, KmeansSpecError } from '../core/index.js';
import { KmfleetError } from '../errors/index.js';
import { S3ObjectChangedError, S3ObjectNotFoundError, UnsafeS3UriError } from './s3/errors.js';

/** A problem with the job itself, already phrased for the user. */
export class JobInputError extends KmfleetError {
  readonly code = 'JOB_INPUT';
}

/** The message to fail the job with, unrecoverably, or null when the failure is worth a retry. */
export function userFacingProblem(err: unknown): string | null {
  if (err instanceof JobInputError) return err.message;
  if (err instanceof SpecValidationError) return err.message;
  if (err instanceof UnsafeS3UriError) return `invalid job: ${err.message}`;
  if (err instanceof DatasetFormatError) return `bad dataset: ${err.message}`;
  if (err instanceof S3ObjectNotFoundError) return `dataset not found: ${err.uri}`;
  if (err instanceof S3ObjectChangedError) return `dataset changed: ${err.message}`;
  if (err instanceof KmeansSpecError) return err.message;
  if (err instanceof NonFiniteInputError) return `bad dataset: ${err.message}`;
  if (err instanceof InvalidArgumentError) return `invalid job: ${err.message}`;
  // S3 access errors are configuration, not transient: retrying will not grant access.
  const status = (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
  const name = (err as { name?: string })?.name;
  // s3Bucket / s3Key: put on the error by the S3 client (worker/s3/client.ts), so the message names what was refused
  const { s3Bucket, s3Key } = (err ?? {}) as { s3Bucket?: string; s3Key?: string };
  const where = s3Bucket === undefined ? '' : ` on s3://${s3Bucket}${s3Key === undefined ? '' : `/${s3Key}`}`;
  if (status === 403 || name === 'AccessDenied') return `access denied by S3${where}: ${(err as Error).message}`;
  if (name === 'NoSuchBucket') {
    return s3Bucket === undefined
      ? `bucket does not exist: ${(err as Error).message}`
      : `bucket '${s3Bucket}' does not exist (s3://${s3Bucket}${s3Key === undefined ? '' : `/${s3Key}`})`;
  }
  return null;
}

/** Wrap user problems as UnrecoverableError (BullMQ fails the job without spending its other attempts). */
export function toJobError(err: unknown): unknown {
  if (err instanceof UnrecoverableError) return err;
  const problem = userFacingProblem(err);
  return problem === null ? err : new UnrecoverableError(problem);
}
