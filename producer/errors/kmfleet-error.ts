/**
 * Base of every error the producer SDK throws on purpose. `exitCode` is what the CLI exits with, so that scripts can
 * tell the outcomes apart: 1 the job failed, was cancelled or is unknown · 2 bad input (the caller can fix the command
 * line) · 3 Redis could not be used (RedisUnavailableError: down, refused, password, TLS) · 4 gave up waiting
 * (WaitTimeoutError: the job goes on).
 */
export class KmfleetError extends Error {
  readonly exitCode: 1 | 2 | 3 | 4 = 1;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Errors whose cause is the caller's input (bad spec, bad flag, bad REDIS_URL, bad limits env). */
export class KmfleetInputError extends KmfleetError {
  override readonly exitCode = 2 as const;
}
