/**
 * A dataset (or centroid file) whose bytes do not describe what we can read. Always a user error: the job fails at
 * once, without retries, and the message names the problem (DESIGN.md, Faults).
 */
export class DatasetFormatError extends Error {
  readonly code = 'DATASET_FORMAT';
  constructor(message: string) {
    super(message);
    this.name = 'DatasetFormatError';
  }
}
