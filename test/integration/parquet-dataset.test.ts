/**
 * A Parquet embedding column clusters bitwise like the same rows given as .npy — through `kmfleet fit` (the real CLI)
 * and through worker jobs (real redis-server, s3rver, worker) from the memory cache and straight from S3 in ranged
 * GETs — and bad files fail at once naming the problem (exit 2 in the CLI; one attempt on the queue). The rows are
 * numpy's (/usr/bin/python3); the Parquet files are written by hyparquet-writer as pyarrow lays out list<float>, with
 * row groups that do not line up with the engine's chunks.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobFailedError } from '../../producer/errors/index.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { asLists, encodeParquet } from '../helpers/parquet.js';
import { bytesOf, ensureDistBuilt, kmfleet, npyData, startStack, type Stack } from './pipeline-fixture.js';

const ROWS = 9_000;
const DIMS = 6;
const K = 7;
const GROUP = 2_500;


describe('dataset format: parquet', () => {
  let dir: string;
  let stack: Stack;
  beforeAll(async () => {
    ensureDistBuilt();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-parquet-'));
    execFileSync('/usr/bin/python3', ['-c', [
      'import numpy as np, sys',
      'rng = np.random.default_rng(7)',
      `centers = rng.normal(scale=10.0, size=(${K}, ${DIMS}))`,
      `x = (centers[rng.integers(0, ${K}, size=${ROWS})] + rng.normal(size=(${ROWS}, ${DIMS}))).astype(np.float32)`,
      'np.save(sys.argv[1] + "/x.npy", x)',
    ].join('\n'), dir]);
    const x = decodeNpy(readFileSync(join(dir, 'x.npy'))).data as Float32Array;
    const ids = Array.from({ length: ROWS }, (_, i) => i);
    const lists = asLists(x, DIMS);
    writeFileSync(join(dir, 'x.parquet'), encodeParquet([{ name: 'id', data: ids, element: 'INT32', scalar: true }, { name: 'emb', data: lists, element: 'FLOAT' }], GROUP));
    const ragged = lists.map((r, i) => (i === 7_777 ? r.slice(0, DIMS - 1) : r));
    writeFileSync(join(dir, 'ragged.parquet'), encodeParquet([{ name: 'emb', data: ragged, element: 'FLOAT' }], GROUP));
    stack = await startStack();
    for (const f of ['x.npy', 'x.parquet', 'ragged.parquet']) await stack.s3.put('data', f, readFileSync(join(dir, f)));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const common = ['--k', String(K), '--seed', '3', '--max-iter', '100', '--chunk-rows', '1000', '--threads', '2', '--backend', 'cpu', '--json'];
  const fit = (input: string, out: string, extra: string[] = []) => kmfleet(['fit', '--input', join(dir, input), '--out', join(dir, out), ...common, ...extra]);

  it('kmfleet fit: the same centroids and assignments as the .npy; bad files exit 2 naming the problem', () => {
    const npy = fit('x.npy', 'fit-npy');
    expect(npy.code, npy.stderr).toBe(0);
    const pq = fit('x.parquet', 'fit-parquet', ['--column', 'emb']);
    expect(pq.code, pq.stderr).toBe(0);
    for (const f of ['centroids.npy', 'assignments.npy']) {
      expect(npyData(join(dir, 'fit-parquet', f)).equals(npyData(join(dir, 'fit-npy', f))), f).toBe(true);
    }
    const [a, b] = [npy, pq].map((r) => JSON.parse(r.stdout.trim().split('\n').pop()!));
    expect(b.iterations).toBe(a.iterations);
    expect(b.input).toMatchObject({ format: 'parquet', column: 'emb', dtype: 'f32' });

    const refused: [string, string[], RegExp][] = [
      ['x.parquet', [], /^kmfleet: error: Parquet file has 2 columns: say which one .*: id, emb/m],
      ['x.parquet', ['--column', 'vectors'], /^kmfleet: error: Parquet file has no column "vectors" \(it has: id, emb\)/m],
      ['x.parquet', ['--column', 'id'], /^kmfleet: error: Parquet column "id" is a scalar column of INT32/m],
      ['ragged.parquet', [], /^kmfleet: error: Parquet column "emb" row 7777 has 5 values, not the 6 of row 0/m],
      ['x.npy', ['--format', 'parquet'], /^kmfleet: error: not a Parquet file/m],
    ];
    for (const [input, extra, message] of refused) {
      const r = fit(input, 'fit-no', extra);
      expect(r.code, `${input} ${extra.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr, input).toMatch(message);
    }
  });

  it('worker jobs: the same outputs as the .npy, from the memory cache and straight from S3; bad files fail in one attempt', async () => {
    const spec = (dataset: Record<string, unknown>) => ({
      // init random: without a memory cache the job then reads S3RowSource itself
      dataset, k: K, init: 'random' as const, seed: 3, maxIter: 100, backend: 'cpu' as const, output: 's3://out/pq',
    });
    const pq = spec({ uri: 's3://data/x.parquet', format: 'parquet', column: 'emb' });
    const cached = await stack.startWorker({ KMFLEET_CHUNK_ROWS: '1000' });
    await stack.client.enqueue(spec({ uri: 's3://data/x.npy' }), { jobId: 'mem-npy' });
    await stack.client.enqueue(pq, { jobId: 'mem-pq' });
    const results: Record<string, Awaited<ReturnType<Stack['client']['wait']>>> = {};
    for (const id of ['mem-npy', 'mem-pq']) results[id] = await stack.client.wait(id, { timeoutMs: 60_000 });
    await cached.shutdown('next worker');
    // no memory cache: every pass reads and decodes whole row groups through ranged GETs
    await stack.startWorker({ KMFLEET_CHUNK_ROWS: '1000', KMFLEET_MEMORY_CACHE_MB: '0', KMFLEET_S3_READ_PART_MB: '1' });
    await stack.client.enqueue(pq, { jobId: 's3-pq' });
    results['s3-pq'] = await stack.client.wait('s3-pq', { timeoutMs: 60_000 });

    const outputs = async (job: string) => ({
      centroids: bytesOf(decodeNpy(await stack.s3.get('out', `pq/${job}/centroids.npy`)).data),
      assignments: bytesOf(decodeNpy(await stack.s3.get('out', `pq/${job}/assignments.npy`)).data),
    });
    const want = await outputs('mem-npy');
    for (const job of ['mem-pq', 's3-pq']) {
      const got = await outputs(job);
      expect(got.centroids.equals(want.centroids), `${job} centroids`).toBe(true);
      expect(got.assignments.equals(want.assignments), `${job} assignments`).toBe(true);
      expect(results[job].iterations, job).toBe(results['mem-npy'].iterations);
      expect(results[job].inertia, job).toBe(results['mem-npy'].inertia);
      expect(results[job].dataset, job).toMatchObject({ rows: ROWS, dims: DIMS });
      // the row groups' GETs are counted: at least the embedding column's bytes came from S3
      expect(results[job].timings.s3Requests, job).toBeGreaterThan(0);
      expect(results[job].timings.s3BytesRead, job).toBeGreaterThan(ROWS * DIMS * 4 * 0.5);
    }
    // without a memory cache the row groups are read again for what the engine's host tier does not hold
    expect(results['s3-pq'].timings.s3BytesRead).toBeGreaterThan(results['mem-pq'].timings.s3BytesRead);

    const cases: [string, Record<string, unknown>, RegExp][] = [
      ['bad-ragged', { uri: 's3://data/ragged.parquet', format: 'parquet' }, /Parquet column "emb" row 7777 has 5 values, not the 6 of row 0/],
      ['bad-column', { uri: 's3://data/x.parquet', format: 'parquet', column: 'vectors' }, /Parquet file has no column "vectors" \(it has: id, emb\)/],
      ['bad-npy-as-parquet', { uri: 's3://data/x.npy', format: 'parquet' }, /not a Parquet file/],
    ];
    for (const [id, dataset] of cases) await stack.client.enqueue({ dataset, k: K, output: 's3://out/pq' }, { jobId: id });
    for (const [id, , message] of cases) {
      const err = await stack.client.wait(id, { timeoutMs: 60_000 }).catch((e: unknown) => e);
      expect(err, id).toBeInstanceOf(JobFailedError);
      expect((err as JobFailedError).failedReason, id).toMatch(message);
      expect((err as JobFailedError).attemptsMade, id).toBe(1);
    }
  });
});
