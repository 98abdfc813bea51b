/**
 * Errors of the S3 layer that callers must tell apart: a missing object and a dataset that changed under a job are
 * user-visible failures (no retry); everything else is either retried here or surfaces as the SDK's own error.
 */
import { KmfleetError, KmfleetInputError } from '../../errors/index.js';

export class S3ObjectNotFoundError extends KmfleetError {
  readonly code = 'S3_NOT_FOUND';
  constructor(readonly uri: string) {
    super(`object not found: ${uri}`);
  }
}

/** The object's ETag differs from the one pinned when the job opened it: the data changed mid-job. */
export class S3ObjectChangedError extends KmfleetError {
  readonly code = 'S3_OBJECT_CHANGED';
  constructor(
    readonly uri: string,
    readonly expectedEtag: string,
    readonly actualEtag: string | undefined,
  ) {
    super(
      `object ${uri} changed during the job (ETag ${expectedEtag} when opened, ${actualEtag ?? 'a different one'} now); ` +
        're-submit the job against the new data',
    );
  }
}

/** A read returned fewer or more bytes than the range asked for (truncated body, lying server). */
export class S3ShortReadError extends KmfleetError {
  readonly code = 'S3_SHORT_READ';
}

/** A KMFLEET_S3_* setting that cannot be used (bad input: the CLI exits with 2). */
export class S3ConfigError extends KmfleetInputError {
  override readonly code = 'S3_CONFIG';
}

/**
 * An s3:// URI the worker refuses to use (producer/s3-uri.ts says why: a '..' segment, an empty segment, a bad bucket…):
 * a user error naming the spec field, so a job put into Redis by hand fails as clearly as the producer would refuse it.
 */
export class UnsafeS3UriError extends KmfleetError {
  readonly code = 'S3_UNSAFE_URI';
  constructor(
    readonly field: string,
    readonly uri: string,
    readonly problem: string,
  ) {
    super(`${field}: ${problem} (got ${JSON.stringify(uri)})`);
  }
}
