// One validator for every s3:// URI (producer/s3-uri.ts): the producer's spec check and the worker's parse both refuse
// URIs whose key a dot-segment-resolving server or proxy would read as another bucket, and name the field.
import { describe, expect, it } from 'vitest';
import { SpecValidationError } from '../../producer/errors/spec-validation-error.js';
import { resolveLimits } from '../../producer/limits.js';
import { parseS3ObjectUri, parseS3PrefixUri, s3UriProblem } from '../../producer/s3-uri.js';
import { parseJobSpec } from '../../producer/spec.js';
import { UnsafeS3UriError } from '../../worker/s3/errors.js';
import { childOf, jobIdKeyProblem, parseS3Uri, parseS3UriOf } from '../../worker/s3/uri.js';

// every one of these names, to some layer, a key outside s3://out/ or one that layers read differently
const HOSTILE: [string, RegExp][] = [
  ['s3://out/../other/x.npy', /'\.' or '\.\.'/],
  ['s3://out/a/../../other/x.npy', /'\.' or '\.\.'/],
  ['s3://out/./x.npy', /'\.' or '\.\.'/],
  ['s3://out/..', /'\.' or '\.\.'/],
  ['s3://out/%2e%2e/other/x.npy', /'\.' or '\.\.'/],
  ['s3://out/.%2E/other/x.npy', /'\.' or '\.\.'/],
  ['s3://out/%252e%252e/other/x.npy', /'\.' or '\.\.'/],
  ['s3://out/a%2f..%2fother/x.npy', /percent-encoded slashes/],
  ['s3://out/..%2fother%2fx.npy', /percent-encoded slashes/],
  ['s3://out/..\\other\\x.npy', /backslashes/],
  ['s3://out/..%5cother/x.npy', /backslashes/],
  ['s3://out//x.npy', /empty path segments/],
  ['s3://out/a//x.npy', /empty path segments/],
  ['s3://out/a/\n../x.npy', /control characters/],
  ['s3://out/a%00/x.npy', /control characters/],
  ['s3://out..other/x.npy', /bucket/],
  ['s3://ou/x.npy', /bucket/],
];

describe('s3 URI validator', () => {
  it('refuses every hostile key as object and as prefix, saying why', () => {
    for (const [uri, why] of HOSTILE) {
      expect(s3UriProblem(uri, 'object'), uri).toMatch(why);
      expect(s3UriProblem(uri, 'prefix'), uri).toMatch(why);
      expect(parseS3ObjectUri(uri), uri).toBeNull();
      expect(parseS3PrefixUri(uri), uri).toBeNull();
    }
  });

  it('keeps ordinary keys, dots inside names included', () => {
    for (const uri of ['s3://out/x.npy', 's3://out/a/.hidden/x.npy', 's3://out/.../x.npy', 's3://out/a..b/x.npy', 's3://my.bucket-1/k %20 space.npy']) {
      expect(s3UriProblem(uri, 'object'), uri).toBeNull();
    }
    expect(parseS3PrefixUri('s3://out/runs/')).toEqual({ bucket: 'out', key: 'runs' });
    expect(parseS3PrefixUri('s3://out')).toEqual({ bucket: 'out', key: '' });
    expect(parseS3PrefixUri('s3://out/')).toEqual({ bucket: 'out', key: '' });
    expect(parseS3PrefixUri('s3://out//')).toBeNull();
    expect(parseS3PrefixUri('s3://out/runs//')).toBeNull();
  });

  it('the spec names each field whose URI would escape, allowed buckets or not', () => {
    for (const limits of [resolveLimits({}, {}), resolveLimits({}, { KMFLEET_ALLOWED_BUCKETS: 'data,out' })]) {
      let err: unknown;
      try {
        parseJobSpec({ dataset: { uri: 's3://data/../other/secret.npy' }, k: 2, init: 's3://data/%2e%2e/other/c.npy', output: 's3://out/../other/x' }, limits);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(SpecValidationError);
      const paths = (err as SpecValidationError).issues.map((i) => i.path);
      expect(paths).toEqual(['dataset.uri', 'init', 'output']);
      for (const issue of (err as SpecValidationError).issues) expect(issue.message).toMatch(/'\.' or '\.\.' path segments.*got "s3:\/\/(data|out)\//);
    }
  });

  it('the worker parse refuses the same URIs, naming the field', () => {
    for (const [uri, why] of HOSTILE) {
      expect(() => parseS3UriOf('dataset.uri', uri, 'object'), uri).toThrow(UnsafeS3UriError);
      expect(() => parseS3UriOf('dataset.uri', uri, 'object'), uri).toThrow(why);
      expect(() => parseS3Uri(uri), uri).toThrow(UnsafeS3UriError);
    }
    expect(() => parseS3UriOf('output', 's3://out/../other')).toThrow(/^output: must be an s3:\/\/bucket\[\/prefix\] URI; .*'\.\.'/);
  });

  it('a key built under the output prefix cannot climb out either (a job id ".." from a hand-made job)', () => {
    expect(childOf('s3://out/runs', 'job-1', 'summary.json')).toEqual({ bucket: 'out', key: 'runs/job-1/summary.json' });
    expect(() => childOf('s3://out', '..', 'summary.json')).toThrow(UnsafeS3UriError);
    expect(() => childOf('s3://out', '..', 'summary.json')).toThrow(/output: .*'\.\.'/);
    expect(() => childOf('s3://out/runs', '.', '_checkpoints', 'c1-a.ckpt')).toThrow(UnsafeS3UriError);
    // the worker refuses such a job before it runs (worker.ts)
    for (const bad of ['..', '.', 'a/b', '%2e%2e', 'a\\b', '']) expect(jobIdKeyProblem(bad), bad).not.toBeNull();
    for (const ok of ['job-1', 'repeat:nightly:1795322429349', '...', '.hidden']) expect(jobIdKeyProblem(ok), ok).toBeNull();
  });
});
