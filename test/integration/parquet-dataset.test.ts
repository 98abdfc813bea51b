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
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { asLists, encodeParquet } from '../helpers/parquet.js';
import { blobsPython, ensureDistBuilt, expectFailsAtOnce, expectSameJobOutputs, kmfleet, npyData, startStack, type Stack } from './pipeline-fixture.js';

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
    execFileSync('/usr/bin/python3', ['-c', blobsPython(ROWS, DIMS, K).join('\n'), dir]);
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

    await expectSameJobOutputs(stack, 'pq', results, 'mem-npy', ['mem-pq', 's3-pq'], { rows: ROWS, dims: DIMS });
    for (const job of ['mem-pq', 's3-pq']) {
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
    await expectFailsAtOnce(stack, 'pq', K, cases);
  });
});
