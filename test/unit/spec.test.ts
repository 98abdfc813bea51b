import { describe, expect, it } from 'vitest';
import { SpecValidationError, parseJobSpec, specHash, type JobSpec } from '../../producer/index.js';
import { DEFAULT_LIMITS, resolveLimits } from '../../producer/limits.js';
import { canonicalJson } from '../../producer/spec.js';
import { specFromFlags } from '../../cli/commands/enqueue.js';

const minimal = { dataset: { uri: 's3://data-bkt/emb/x.npy' }, k: 64, output: 's3://out-bkt/runs/' };

function issuesOf(input: unknown, limits = DEFAULT_LIMITS): Record<string, string> {
  try {
    parseJobSpec(input, { ...limits });
  } catch (e) {
    expect(e).toBeInstanceOf(SpecValidationError);
    const err = e as SpecValidationError;
    // The message names every issue, so one line tells the user everything.
    for (const i of err.issues) expect(err.message).toContain(`${i.path}: ${i.message}`);
    expect(err.exitCode).toBe(2);
    return Object.fromEntries(err.issues.map((i) => [i.path, i.message]));
  }
  throw new Error('expected a SpecValidationError');
}

describe('job spec v1: defaults', () => {
  it('fills every default and normalizes the output prefix', () => {
    const spec = parseJobSpec(minimal);
    expect(spec).toEqual({
      version: 1,
      dataset: { uri: 's3://data-bkt/emb/x.npy', format: 'npy' },
      k: 64,
      metric: 'l2',
      init: 'kmeans++',
      maxIter: 300,
      tol: 1e-4,
      tolReassign: 0,
      seed: 0,
      precision: 'auto',
      output: 's3://out-bkt/runs',
      checkpointEvery: 1,
      backend: 'auto',
    } satisfies JobSpec);
  });

  it('keeps every explicit value', () => {
    const full = {
      version: 1,
      dataset: { uri: 's3://b12/raw.f16', format: 'f16', dims: 128 },
      k: 1000,
      metric: 'cosine',
      init: 's3://b12/models/c.npy',
      maxIter: 50,
      tol: 0,
      tolReassign: 0.01,
      seed: 4294967295,
      precision: 'bf16',
      output: 's3://b12',
      name: 'Emb_v2.nightly-1',
      checkpointEvery: 0,
      backend: 'cuda',
    };
    expect(parseJobSpec(full)).toEqual(full);
    for (const init of ['kmeans++', 'random', 'previous']) {
      expect(parseJobSpec({ ...minimal, init, name: 'm' }).init).toBe(init);
    }
  });

  it('is idempotent: a parsed spec parses to itself (the worker validates again)', () => {
    const once = parseJobSpec({ ...minimal, dataset: { uri: 's3://data-bkt/a.f32', format: 'f32', dims: 3 } });
    expect(parseJobSpec(JSON.parse(JSON.stringify(once)))).toEqual(once);
  });
});

describe('job spec v1: one error names every bad field', () => {
  it('reports all fields wrong at once, with path, problem and the value given', () => {
    const issues = issuesOf({
      version: 2,
      dataset: { uri: 'http://x/y', format: 'f33', dims: 0, extra: true },
      k: 0,
      metric: 'L2',
      init: 'kmeans+++',
      maxIter: 1.5,
      tol: -1,
      tolReassign: 1.5,
      seed: -1,
      precision: 'fp64',
      output: 'S3://Bucket',
      name: 'bad name!',
      checkpointEvery: -2,
      backend: 'tpu',
      maxiter: 10,
    });
    expect(Object.keys(issues).sort()).toEqual(
      [
        'version', 'dataset.uri', 'dataset.format', 'dataset.dims', 'dataset.extra', 'k', 'metric', 'init',
        'maxIter', 'tol', 'tolReassign', 'seed', 'precision', 'output', 'name', 'checkpointEvery', 'backend', 'maxiter',
      ].sort(),
    );
    expect(issues['dataset.uri']).toMatch(/s3:\/\/bucket\/key.*got "http:\/\/x\/y"/);
    expect(issues['dataset.format']).toMatch(/npy, npz, parquet, arrow, fvecs, bvecs, f32, f16.*"f33"/);
    expect(issues['k']).toMatch(/integer from 1 to 1000000.*got 0/);
    expect(issues['maxIter']).toMatch(/integer.*got 1.5/);
    expect(issues['tolReassign']).toMatch(/from 0 to 1/);
    expect(issues['maxiter']).toMatch(/did you mean maxIter/);
    expect(issues['dataset.extra']).toMatch(/unknown field/);
  });

  it.each([
    ['k', 'a string', '64', /integer/],
    ['k', 'a float', 2.5, /integer/],
    ['k', 'NaN', Number.NaN, /integer/],
    ['k', 'null', null, /integer/],
    ['k', 'over maxK', 1_000_001, /1000000.*KMFLEET_MAX_K/],
    ['maxIter', 'zero', 0, /from 1 to 10000/],
    ['maxIter', 'over the limit', 10_001, /KMFLEET_MAX_ITER/],
    ['tol', 'Infinity', Number.POSITIVE_INFINITY, />= 0/],
    ['tol', 'a string', '1e-4', />= 0/],
    ['tolReassign', 'negative', -0.1, /from 0 to 1/],
    ['seed', 'over 2^32-1', 2 ** 32, /4294967295/],
    ['seed', 'a float', 0.5, /integer/],
    ['metric', 'case', 'COSINE', /l2, cosine/],
    ['metric', 'a number', 2, /l2, cosine/],
    ['init', 'an s3 URI that is not .npy', 's3://b12/c.bin', /\.npy/],
    ['init', 'a non-s3 URI', 'gs://b12/c.npy', /\.npy/],
    ['init', 'previous without a name', 'previous', null],
    ['precision', 'unknown', 'fp8', /auto, fp32, tf32, bf16, fp16/],
    ['output', 'no scheme', 'bucket/prefix', /s3:\/\/bucket\[\/prefix\]/],
    ['output', 'a bad bucket', 's3://a/prefix', /s3:\/\/bucket/],
    ['output', 'a double slash', 's3://bkt//p', /s3:\/\/bucket/],
    ['name', 'too long', 'x'.repeat(129), /1-128/],
    ['name', 'a slash', 'a/b', /a-zA-Z0-9/],
    ['name', 'empty', '', /1-128/],
    ['checkpointEvery', 'a float', 1.5, /integer >= 0/],
    ['backend', 'unknown', 'gpu', /auto, cpu, cuda/],
  ])('%s: %s', (field, _what, value, pattern) => {
    const issues = issuesOf({ ...minimal, [field]: value });
    if (pattern === null) {
      expect(issues).toHaveProperty('name');
      expect(issues.name).toMatch(/required when init is "previous"/);
    } else {
      expect(Object.keys(issues)).toEqual([field]);
      expect(issues[field]).toMatch(pattern);
    }
  });

  it.each([
    ['missing', undefined, /required/],
    ['not an object', 's3://b12/x.npy', /object/],
    ['a bucket only', { uri: 's3://b12' }, /s3:\/\/bucket\/key/],
    ['a trailing slash', { uri: 's3://b12/dir/' }, /s3:\/\/bucket\/key/],
    ['an uppercase bucket', { uri: 's3://B12/x.npy' }, /s3:\/\/bucket\/key/],
  ])('dataset: %s', (_what, dataset, pattern) => {
    const issues = issuesOf({ ...minimal, dataset });
    const [path] = Object.keys(issues);
    expect(path.startsWith('dataset')).toBe(true);
    expect(Object.values(issues)[0]).toMatch(pattern);
  });

  it('requires dims for raw formats and accepts them for npy', () => {
    for (const format of ['f32', 'f16']) {
      expect(issuesOf({ ...minimal, dataset: { uri: 's3://b12/x', format } })).toEqual({
        'dataset.dims': `is required for raw format ${format} (the file has no header)`,
      });
    }
    expect(parseJobSpec({ ...minimal, dataset: { uri: 's3://b12/x.npy', dims: 7 } }).dataset.dims).toBe(7);
  });

  it('npz, fvecs and bvecs need no dims; member is for npz only, convert for npy and npz', () => {
    for (const format of ['npz', 'fvecs', 'bvecs'] as const) {
      expect(parseJobSpec({ ...minimal, dataset: { uri: 's3://b12/x', format } }).dataset).toEqual({ uri: 's3://b12/x', format });
    }
    expect(parseJobSpec({ ...minimal, dataset: { uri: 's3://b12/x.npz', format: 'npz', member: 'emb', convert: 'f64-to-f32' } }).dataset)
      .toEqual({ uri: 's3://b12/x.npz', format: 'npz', member: 'emb', convert: 'f64-to-f32' });
    expect(issuesOf({ ...minimal, dataset: { uri: 's3://b12/x.npy', member: 'emb' } })).toEqual({
      'dataset.member': 'applies to npz datasets only (format is npy)',
    });
    expect(issuesOf({ ...minimal, dataset: { uri: 's3://b12/x.fvecs', format: 'fvecs', convert: 'f64-to-f32' } })).toEqual({
      'dataset.convert': 'applies to npy, npz, parquet and arrow datasets only (format fvecs is read as it is)',
    });
    expect(issuesOf({ ...minimal, dataset: { uri: 's3://b12/x.npz', format: 'npz', member: '' } })['dataset.member']).toMatch(/name of an array/);
  });

  it('parquet, arrow: column (parquet and arrow only) and convert; kmfleet enqueue --column reaches the spec', async () => {
    expect(parseJobSpec({ ...minimal, dataset: { uri: 's3://b12/x.parquet', format: 'parquet', column: 'emb', convert: 'f64-to-f32' } }).dataset)
      .toEqual({ uri: 's3://b12/x.parquet', format: 'parquet', column: 'emb', convert: 'f64-to-f32' });
    expect(parseJobSpec({ ...minimal, dataset: { uri: 's3://b12/x.arrow', format: 'arrow', column: 'emb', convert: 'f64-to-f32' } }).dataset)
      .toEqual({ uri: 's3://b12/x.arrow', format: 'arrow', column: 'emb', convert: 'f64-to-f32' });
    expect(issuesOf({ ...minimal, dataset: { uri: 's3://b12/x.npz', format: 'npz', column: 'emb' } })).toEqual({
      'dataset.column': 'applies to parquet and arrow datasets only (format is npz)',
    });
    expect(issuesOf({ ...minimal, dataset: { uri: 's3://b12/x.parquet', format: 'parquet', column: '' } })['dataset.column']).toMatch(/name of a column/);
    const spec = await specFromFlags({ dataset: 's3://b12/x.parquet', format: 'parquet', column: 'emb', k: '4', output: 's3://out-bkt/r' });
    expect(parseJobSpec(spec).dataset).toEqual({ uri: 's3://b12/x.parquet', format: 'parquet', column: 'emb' });
    const arrow = await specFromFlags({ dataset: 's3://b12/x.arrows', format: 'arrow', column: 'emb', k: '4', output: 's3://out-bkt/r' });
    expect(parseJobSpec(arrow).dataset).toEqual({ uri: 's3://b12/x.arrows', format: 'arrow', column: 'emb' });
  });

  it('kmfleet enqueue --format npz --member reaches the spec', async () => {
    const spec = await specFromFlags({ dataset: 's3://b12/x.npz', format: 'npz', member: 'emb', k: '4', output: 's3://out-bkt/r' });
    expect(parseJobSpec(spec).dataset).toEqual({ uri: 's3://b12/x.npz', format: 'npz', member: 'emb' });
  });

  it('gpus: a count from 1 to 64, all or auto, absent by default; kmfleet enqueue --gpus reaches the spec', async () => {
    expect(parseJobSpec(minimal).gpus).toBeUndefined();
    for (const gpus of [1, 8, 64, 'all', 'auto']) expect(parseJobSpec({ ...minimal, gpus }).gpus).toBe(gpus);
    for (const gpus of [0, 65, 1.5, 'two', null, [2]])
      expect(Object.entries(issuesOf({ ...minimal, gpus }))).toEqual([['gpus', expect.stringMatching(/^must be an integer from 1 to 64, all or auto/)]]);
    expect(parseJobSpec(await specFromFlags({ dataset: 's3://data-bkt/x.npy', k: '8', output: 's3://out-bkt', gpus: '2' })).gpus).toBe(2);
    expect(parseJobSpec(await specFromFlags({ dataset: 's3://data-bkt/x.npy', k: '8', output: 's3://out-bkt', gpus: 'all' })).gpus).toBe('all');
  });

  it('names the missing required fields of an empty spec and refuses non-objects', () => {
    expect(Object.keys(issuesOf({})).sort()).toEqual(['dataset', 'k', 'output']);
    for (const bad of [null, 'spec', 42, [minimal]]) expect(Object.keys(issuesOf(bad))).toEqual(['']);
    expect(() => parseJobSpec(null)).toThrow(/\(spec\): must be a JSON object/);
  });
});

describe('job spec v1: limits', () => {
  it('refuses specs over configured limits and accepts them at the limit', () => {
    const limits = { ...DEFAULT_LIMITS, maxK: 10, maxDims: 8, maxIter: 5 };
    const spec = { ...minimal, k: 10, maxIter: 5, dataset: { uri: 's3://b12/x', format: 'f32', dims: 8 } };
    expect(parseJobSpec(spec, limits).k).toBe(10);
    expect(issuesOf({ ...spec, k: 11, maxIter: 6, dataset: { ...spec.dataset, dims: 9 } }, limits)).toEqual({
      'dataset.dims': 'must be an integer from 1 to 8 (limit KMFLEET_MAX_DIMS) (got 9)',
      k: 'must be an integer from 1 to 10 (limit KMFLEET_MAX_K) (got 11)',
      maxIter: 'must be an integer from 1 to 5 (limit KMFLEET_MAX_ITER) (got 6)',
    });
  });

  it('refuses k × dims × 4 over the centroid-bytes limit', () => {
    const limits = { ...DEFAULT_LIMITS, maxCentroidBytes: 4000 };
    const spec = { ...minimal, k: 100, dataset: { uri: 's3://b12/x', format: 'f32', dims: 10 } };
    expect(parseJobSpec(spec, limits).k).toBe(100);
    expect(issuesOf({ ...spec, k: 101 }, limits).k).toMatch(/4040 bytes of centroids.*4000.*KMFLEET_MAX_CENTROID_BYTES/);
  });

  it('reads KMFLEET_MAX_* from the environment, overrides win, junk is refused', () => {
    const env = { KMFLEET_MAX_K: '1_000', KMFLEET_MAX_ITER: '20', KMFLEET_MAX_DIMS: '' };
    const l = resolveLimits({}, env);
    expect(l).toEqual({ ...DEFAULT_LIMITS, maxK: 1000, maxIter: 20 });
    expect(resolveLimits({ maxK: 7 }, env).maxK).toBe(7);
    expect(() => resolveLimits({}, { KMFLEET_MAX_K: 'lots' })).toThrow(/KMFLEET_MAX_K must be a positive integer \(got "lots"\)/);
    expect(() => resolveLimits({}, { KMFLEET_MAX_DIMS: '-3' })).toThrow(/KMFLEET_MAX_DIMS/);
    expect(() => resolveLimits({ maxIter: 0 })).toThrow(/limits.maxIter/);
    expect(issuesOf({ ...minimal, k: 1001 }, l).k).toMatch(/from 1 to 1000 /);
  });
});

describe('spec hash', () => {
  it('is the same for equal specs whatever the key order or defaults spelled out', () => {
    const a = parseJobSpec(minimal);
    const b = parseJobSpec({ output: 's3://out-bkt/runs', k: 64, metric: 'l2', seed: 0, dataset: { format: 'npy', uri: 's3://data-bkt/emb/x.npy' } });
    expect(specHash(a)).toBe(specHash(b));
    expect(specHash(a)).toMatch(/^[0-9a-f]{64}$/);
  });

  it('ignores output, name, checkpointEvery, maxIter and gpus; changes with anything that moves centroids', () => {
    const base = parseJobSpec(minimal);
    const h = specHash(base);
    for (const same of [{ output: 's3://other-bkt' }, { name: 'm' }, { checkpointEvery: 9 }, { maxIter: 1000 }, { gpus: 4 }, { gpus: 'all' }]) {
      expect(specHash(parseJobSpec({ ...minimal, ...same }))).toBe(h);
    }
    for (const diff of [{ k: 65 }, { seed: 1 }, { metric: 'cosine' }, { init: 'random' }, { precision: 'fp32' },
      { tol: 0 }, { tolReassign: 0.1 }, { backend: 'cpu' }, { dataset: { uri: 's3://data-bkt/emb/y.npy' } }]) {
      expect(specHash(parseJobSpec({ ...minimal, ...diff }))).not.toBe(h);
    }
  });

  it('pins the canonical form (changing it would orphan every checkpoint)', () => {
    expect(canonicalJson({ b: 1, a: [{ d: undefined, c: 'x' }, 2], e: null })).toBe('{"a":[{"c":"x"},2],"b":1,"e":null}');
    // = sha256 of '{"backend":"auto","dataset":{"format":"npy","uri":"s3://data-bkt/emb/x.npy"},"init":"kmeans++",
    //   "k":64,"metric":"l2","precision":"auto","seed":0,"tol":0.0001,"tolReassign":0,"version":1}' (checked with sha256sum)
    expect(specHash(parseJobSpec(minimal))).toBe('715f672c012c339155af56ca1f04dd755d1dfa6d668fff68edae6b6193306f50');
  });
});
