// KMFLEET_ALLOWED_BUCKETS: the credentials of a fleet may reach more buckets than its jobs should. A spec that names
// any other bucket (dataset, initial centroids, output) is refused with the other bad fields, by the producer and
// again by the worker (both call parseJobSpec with their own limits).
import { describe, expect, it } from 'vitest';
import { LimitsConfigError } from '../../producer/errors/limits-config-error.js';
import { resolveLimits } from '../../producer/limits.js';
import { parseJobSpec } from '../../producer/spec.js';
import { SpecValidationError } from '../../producer/errors/spec-validation-error.js';

const spec = (over: Record<string, unknown> = {}) => ({ dataset: { uri: 's3://data/x.npy' }, k: 4, output: 's3://out/runs', ...over });

describe('allowed buckets', () => {
  it('any bucket when unset', () => {
    const limits = resolveLimits({}, {});
    expect(limits.allowedBuckets).toBeUndefined();
    expect(parseJobSpec(spec({ output: 's3://elsewhere/x' }), limits).output).toBe('s3://elsewhere/x');
  });

  it('refuses every field that names a bucket outside the list, in one error', () => {
    const limits = resolveLimits({}, { KMFLEET_ALLOWED_BUCKETS: ' data , out ' });
    expect(limits.allowedBuckets).toEqual(['data', 'out']);
    expect(parseJobSpec(spec({ init: 's3://data/c.npy' }), limits).dataset.uri).toBe('s3://data/x.npy');
    let err: unknown;
    try {
      parseJobSpec(spec({ dataset: { uri: 's3://secrets/x.npy' }, init: 's3://other/c.npy', output: 's3://public-bucket' }), limits);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SpecValidationError);
    const message = (err as Error).message;
    expect(message).toMatch(/dataset\.uri.*bucket 'secrets' is not allowed here \(KMFLEET_ALLOWED_BUCKETS: data, out\)/);
    expect(message).toMatch(/init.*bucket 'other'/);
    expect(message).toMatch(/output.*bucket 'public-bucket'/);
  });

  it('refuses a list that holds no bucket names', () => {
    expect(() => resolveLimits({}, { KMFLEET_ALLOWED_BUCKETS: 'data,Bad_Name' })).toThrow(LimitsConfigError);
    expect(() => resolveLimits({}, { KMFLEET_ALLOWED_BUCKETS: 'data,Bad_Name' })).toThrow(/Bad_Name/);
  });
});
