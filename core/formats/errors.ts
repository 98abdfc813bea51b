import { KmfleetError } from '../../errors/index.js';

/**
 * A dataset (or centroid file) whose bytes do not describe what we can read. Always a user error: the job fails at
 * once, without retries, and the message names the problem (DESIGN.md, Faults).
 */
export class DatasetFormatError extends KmfleetError {
  readonly code = 'DATASET_FORMAT';
}
