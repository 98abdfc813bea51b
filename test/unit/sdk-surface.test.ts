/**
 * `kmfleet/producer` (producer/index.ts) is the SDK's whole surface: a value exported there is a promise to users, so
 * a new one must be added here on purpose. Everything else of the contract is imported by path.
 */
import { describe, expect, it } from 'vitest';
import * as sdk from '../../producer/index.js';
import { KmfleetError } from '../../errors/index.js';

describe('kmfleet/producer', () => {
  it('exports these values and no others', () => {
    expect(Object.keys(sdk).sort()).toEqual([
      'ArgumentError', 'ConnectionConfigError', 'DEFAULT_JOB_OPTIONS', 'DEFAULT_PRIORITY', 'JobCancelledError',
      'JobFailedError', 'JobNotFoundError', 'KmfleetClient', 'KmfleetError', 'KmfleetInputError', 'LimitsConfigError',
      'MAX_PRIORITY', 'RedisUnavailableError', 'SPEC_DEFAULTS', 'SPEC_VERSION', 'SpecValidationError', 'WaitTimeoutError',
      'connectionFromEnv', 'isAbortError', 'jobSpecSchema', 'parseJobSpec', 'specHash',
    ]);
  });

  it('its errors are the project-wide root and its subclasses', () => {
    expect(sdk.KmfleetError).toBe(KmfleetError);
    expect(new sdk.WaitTimeoutError('j', 5, 'active')).toBeInstanceOf(sdk.KmfleetError);
  });
});
