/**
 * Base of every error the producer SDK throws on purpose. `exitCode` is what the CLI exits with:
 * 2 for bad input (the caller can fix the command line), 1 for failures (the job, Redis, a timeout).
 */
export class KmfleetError extends Error {
  readonly exitCode: 1 | 2 = 1;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Errors whose cause is the caller's input (bad spec, bad flag, bad REDIS_URL, bad limits env). */
export class KmfleetInputError extends KmfleetError {
  override readonly exitCode = 2 as const;
}
