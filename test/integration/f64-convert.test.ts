/**
 * A float64 .npy (numpy's default dtype) clusters exactly like its float32 cast — through `kmfleet fit --convert
 * f64-to-f32` (the real CLI) and through a worker job with dataset.convert (real redis-server, s3rver, worker), with
 * the dataset in the memory cache and read straight from S3 — and is refused, naming the option, without it.
 * The data and the cast are numpy's own (/usr/bin/python3): the reference is what a Python user would have made.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobFailedError } from '../../producer/errors/index.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { bytesOf, ensureDistBuilt, kmfleet, npyData, startStack, type Stack } from './pipeline-fixture.js';

const ROWS = 12_000;
const DIMS = 6;
const K = 7;


describe('dataset.convert f64-to-f32', () => {
  let dir: string;
  let stack: Stack;
  beforeAll(async () => {
    ensureDistBuilt();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-f64-'));
    // blobs whose coordinates are doubles that float32 cannot hold exactly
    execFileSync('/usr/bin/python3', ['-c', [
      'import numpy as np, sys',
      'rng = np.random.default_rng(42)',
      `centers = rng.normal(scale=10.0, size=(${K}, ${DIMS}))`,
      `x = centers[rng.integers(0, ${K}, size=${ROWS})] + rng.normal(size=(${ROWS}, ${DIMS})) / 3.0`,
      'assert x.dtype == np.float64',
      `np.save(sys.argv[1] + "/f64.npy", x)`,
      `np.save(sys.argv[1] + "/f32.npy", x.astype(np.float32))`,
    ].join('\n'), dir]);
    stack = await startStack();
    await stack.s3.put('data', 'f64.npy', readFileSync(join(dir, 'f64.npy')));
    await stack.s3.put('data', 'f32.npy', readFileSync(join(dir, 'f32.npy')));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('kmfleet fit: the same centroids and assignments as the float32 cast; refused without --convert', () => {
    const common = ['--k', String(K), '--seed', '3', '--max-iter', '100', '--chunk-rows', '1000', '--threads', '2', '--backend', 'cpu', '--json'];
    const a = kmfleet(['fit', '--input', join(dir, 'f64.npy'), '--convert', 'f64-to-f32', '--out', join(dir, 'fit-f64'), ...common]);
    expect(a.code, a.stderr).toBe(0);
    const b = kmfleet(['fit', '--input', join(dir, 'f32.npy'), '--out', join(dir, 'fit-f32'), ...common]);
    expect(b.code, b.stderr).toBe(0);
    for (const f of ['centroids.npy', 'assignments.npy']) {
      expect(npyData(join(dir, 'fit-f64', f)).equals(npyData(join(dir, 'fit-f32', f))), f).toBe(true);
    }
    const summary = JSON.parse(a.stdout.trim().split('\n').pop()!);
    expect(summary.input).toMatchObject({ dtype: 'f32', convert: 'f64-to-f32' });
    expect(summary.iterations).toBe(JSON.parse(b.stdout.trim().split('\n').pop()!).iterations);

    const refused = kmfleet(['fit', '--input', join(dir, 'f64.npy'), '--out', join(dir, 'fit-no'), ...common]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^kmfleet: error: .*'<f8' is not supported .*--convert f64-to-f32/m);
  });

  it('a worker job: the same outputs as the float32 cast, from the memory cache and straight from S3', async () => {
    const spec = (uri: string, convert?: boolean) => ({
      dataset: { uri, ...(convert ? { convert: 'f64-to-f32' as const } : {}) }, k: K, seed: 3, maxIter: 100, init: 'random' as const,
      backend: 'cpu' as const, output: 's3://out/conv',
    });
    const cached = await stack.startWorker({ KMFLEET_CHUNK_ROWS: '1000' });
    await stack.client.enqueue(spec('s3://data/f32.npy'), { jobId: 'cast' });
    await stack.client.enqueue(spec('s3://data/f64.npy', true), { jobId: 'conv-mem' });
    const cast = await stack.client.wait('cast', { timeoutMs: 60_000 });
    const mem = await stack.client.wait('conv-mem', { timeoutMs: 60_000 });
    await cached.shutdown('next worker');
    // no memory cache and no rows kept by the engine: every pass reads float64 rows from S3 in parallel ranged GETs and
    // converts them
    await stack.startWorker({
      KMFLEET_CHUNK_ROWS: '1000', KMFLEET_MEMORY_CACHE_MB: '0', KMFLEET_S3_READ_PART_MB: '1', KMFLEET_GPU_MEMORY: '0', KMFLEET_HOST_MEMORY: '0',
    });
    await stack.client.enqueue(spec('s3://data/f64.npy', true), { jobId: 'conv-s3' });
    const direct = await stack.client.wait('conv-s3', { timeoutMs: 60_000 });

    const reference = {
      centroids: bytesOf(decodeNpy(await stack.s3.get('out', 'conv/cast/centroids.npy')).data),
      assignments: bytesOf(decodeNpy(await stack.s3.get('out', 'conv/cast/assignments.npy')).data),
    };
    for (const [id, result] of [['conv-mem', mem], ['conv-s3', direct]] as const) {
      for (const f of ['centroids', 'assignments'] as const) {
        const got = bytesOf(decodeNpy(await stack.s3.get('out', `conv/${id}/${f}.npy`)).data);
        expect(got.equals(reference[f]), `${id} ${f}`).toBe(true);
      }
      expect(result.iterations, id).toBe(cast.iterations);
      expect(result.inertia, id).toBe(cast.inertia);
      expect(result.dataset, id).toMatchObject({ rows: ROWS, dims: DIMS, format: 'npy' });
      expect(result.spec.dataset.convert, id).toBe('f64-to-f32');
    }
    // what came from S3 is the float64 object: 8 bytes a value, read once into memory, once per pass without it
    expect(mem.timings.s3BytesRead).toBe(ROWS * DIMS * 8);
    expect(direct.timings.s3BytesRead).toBeGreaterThan(direct.iterations * ROWS * DIMS * 8);
  });

  it('a worker job on float64 without convert fails at once, naming the option', async () => {
    await stack.client.enqueue({ dataset: { uri: 's3://data/f64.npy' }, k: K, output: 's3://out/conv' }, { jobId: 'no-convert' });
    const err = await stack.client.wait('no-convert', { timeoutMs: 60_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(JobFailedError);
    expect((err as JobFailedError).failedReason).toMatch(/'<f8' is not supported .*dataset\.convert: "f64-to-f32"/);
    expect((err as JobFailedError).attemptsMade).toBe(1);
  });
});
