import { EXIT_STATUS, type ErrorCode, type ExitStatus } from './exit-status.js';

/**
 * The root of every error kmfleet throws on purpose, in every layer (SDK, worker, k-means core, engine, CLI, API).
 * `code` says what went wrong for programs; `name` is the class's name; the message is for people.
 */
export abstract class KmfleetError extends Error {
  abstract readonly code: ErrorCode;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }

  /** what the CLI exits with for this error (errors/exit-status.ts) */
  get exitCode(): ExitStatus {
    return EXIT_STATUS[this.code];
  }
}
