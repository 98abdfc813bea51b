import { KmfleetInputError } from '../../errors/index.js';

/** One problem of a spec: where (dotted path, e.g. `dataset.dims`) and what. */
export interface SpecIssue {
  path: string;
  message: string;
}

/**
 * A job spec that failed validation. The message names EVERY bad field in one line, so the producer
 * (and a worker that re-validates) sees all problems at once, e.g.
 *   invalid job spec (2 problems): dataset.uri: must be an s3:// URI ... (got "x"); k: must be an integer ...
 */
export class SpecValidationError extends KmfleetInputError {
  override readonly code = 'INVALID_JOB_SPEC';
  readonly issues: readonly SpecIssue[];
  constructor(issues: SpecIssue[]) {
    const n = issues.length;
    super(
      `invalid job spec (${n} problem${n === 1 ? '' : 's'}): ` +
        issues.map((i) => `${i.path || '(spec)'}: ${i.message}`).join('; '),
    );
    this.issues = issues;
  }
}
