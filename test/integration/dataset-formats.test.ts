/**
 * fvecs, bvecs and .npz datasets cluster bitwise like the same rows given as .npy — through `kmfleet fit` (the real
 * CLI) and through worker jobs (real redis-server, s3rver, worker) with the dataset in the memory cache and read
 * straight from S3 in ranged GETs — and bad files fail at once naming the problem (exit 2 in the CLI; one attempt on
 * the queue). The .npz files are numpy's own (np.savez / np.savez_compressed under /usr/bin/python3); fvecs and
 * bvecs are written by hand (test/helpers/vecs.ts), as the ANN benchmarks lay them out.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { encodeBvecs, encodeFvecs } from '../helpers/vecs.js';
import { blobsPython, ensureDistBuilt, expectFailsAtOnce, expectSameJobOutputs, kmfleet, npyData, startStack, type Stack } from './pipeline-fixture.js';

const ROWS = 9_000;
const DIMS = 6;
const K = 7;


describe('dataset formats: fvecs, bvecs, npz', () => {
  let dir: string;
  let stack: Stack;
  const files: Record<string, Buffer> = {};
  beforeAll(async () => {
    ensureDistBuilt();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-formats-'));
    execFileSync('/usr/bin/python3', ['-c', [
      ...blobsPython(ROWS, DIMS, K),
      'np.savez(d + "/x.npz", ids=np.arange(len(x)), emb=x)',
      'np.savez_compressed(d + "/xc.npz", x)',
      `u = np.clip(centers[rng.integers(0, ${K}, size=${ROWS})] * 8 + 128 + rng.normal(scale=6, size=(${ROWS}, ${DIMS})), 0, 255).astype(np.uint8)`,
      'np.save(d + "/u8.npy", u)',
      'np.save(d + "/u.npy", u.astype(np.float32))',
    ].join('\n'), dir]);
    const x = decodeNpy(readFileSync(join(dir, 'x.npy'))).data as Float32Array;
    writeFileSync(join(dir, 'x.fvecs'), encodeFvecs(x, DIMS));
    const u8 = readFileSync(join(dir, 'u8.npy')).subarray(-ROWS * DIMS);
    writeFileSync(join(dir, 'u.bvecs'), encodeBvecs(u8, DIMS));
    const fvecs = readFileSync(join(dir, 'x.fvecs'));
    writeFileSync(join(dir, 'cut.fvecs'), fvecs.subarray(0, fvecs.length - 10));
    for (const f of ['x.npy', 'x.npz', 'xc.npz', 'x.fvecs', 'u.npy', 'u.bvecs', 'cut.fvecs']) files[f] = readFileSync(join(dir, f));
    stack = await startStack();
    for (const [name, bytes] of Object.entries(files)) await stack.s3.put('data', name, bytes);
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const common = ['--k', String(K), '--seed', '3', '--max-iter', '100', '--chunk-rows', '1000', '--threads', '2', '--backend', 'cpu', '--json'];
  const fit = (input: string, out: string, extra: string[] = []) => kmfleet(['fit', '--input', join(dir, input), '--out', join(dir, out), ...common, ...extra]);

  it('kmfleet fit: the same centroids and assignments as the .npy; bad files exit 2 naming the problem', () => {
    const runs: [string, string, string, string[]][] = [
      ['x.npy', 'fit-npy', 'fit-npy', []],
      ['x.fvecs', 'fit-fvecs', 'fit-npy', []],
      ['x.npz', 'fit-npz', 'fit-npy', ['--member', 'emb']],
      ['u.npy', 'fit-u', 'fit-u', []],
      ['u.bvecs', 'fit-bvecs', 'fit-u', []],
    ];
    const summaries: Record<string, { iterations: number; input: Record<string, unknown> }> = {};
    for (const [input, out, reference, extra] of runs) {
      const r = fit(input, out, extra);
      expect(r.code, `${input}: ${r.stderr}`).toBe(0);
      summaries[out] = JSON.parse(r.stdout.trim().split('\n').pop()!);
      if (out === reference) continue;
      for (const f of ['centroids.npy', 'assignments.npy']) {
        expect(npyData(join(dir, out, f)).equals(npyData(join(dir, reference, f))), `${input} ${f}`).toBe(true);
      }
      expect(summaries[out].iterations, input).toBe(summaries[reference].iterations);
    }
    expect(summaries['fit-npz'].input).toMatchObject({ format: 'npz', member: 'emb.npy', dtype: 'f32' });
    expect(summaries['fit-bvecs'].input).toMatchObject({ format: 'bvecs', dtype: 'f32' });

    const refused: [string, string[], RegExp][] = [
      ['cut.fvecs', [], /^kmfleet: error: fvecs file of 251990 bytes is not a whole number of 6-dim records \(28 bytes each: 8999 records and 18 bytes left over/m],
      ['x.fvecs', ['--dims', '5'], /^kmfleet: error: fvecs records have 6 dims, not the 5 given/m],
      ['xc.npz', [], /^kmfleet: error: \.npz member arr_0\.npy is deflated \(np\.savez_compressed\).*np\.savez \(not np\.savez_compressed\)/m],
      ['x.npz', [], /^kmfleet: error: \.npz has 2 arrays and none is arr_0: say which one .*: ids, emb/m],
      ['x.npz', ['--member', 'vectors'], /^kmfleet: error: \.npz has no member "vectors" \(it has: ids, emb\)/m],
      ['x.npz', ['--member', 'ids'], /^kmfleet: error: \.npz member ids\.npy: .*'<i8' is not supported/m],
      ['x.npy', ['--format', 'fvecs'], /^kmfleet: error: fvecs record 0 declares -?\d+ dims/m],
    ];
    for (const [input, extra, message] of refused) {
      const r = fit(input, 'fit-no', extra);
      expect(r.code, `${input} ${extra.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr, input).toMatch(message);
    }
  });

  it('worker jobs: the same outputs as the .npy, from the memory cache and straight from S3', async () => {
    const spec = (uri: string, format: 'npy' | 'npz' | 'fvecs' | 'bvecs', member?: string) => ({
      // init random: without a memory cache the job then reads S3RowSource itself (k-means++ would download the
      // dataset into memory for its sample, job-open.ts)
      dataset: { uri, format, ...(member ? { member } : {}) }, k: K, init: 'random' as const, seed: 3, maxIter: 100, backend: 'cpu' as const, output: 's3://out/fmt',
    });
    const jobs: [string, ReturnType<typeof spec>, string][] = [
      ['npy', spec('s3://data/x.npy', 'npy'), 'npy'],
      ['fvecs', spec('s3://data/x.fvecs', 'fvecs'), 'npy'],
      ['npz', spec('s3://data/x.npz', 'npz', 'emb'), 'npy'],
      ['u', spec('s3://data/u.npy', 'npy'), 'u'],
      ['bvecs', spec('s3://data/u.bvecs', 'bvecs'), 'u'],
    ];
    const results: Record<string, Awaited<ReturnType<Stack['client']['wait']>>> = {};
    const cached = await stack.startWorker({ KMFLEET_CHUNK_ROWS: '1000' });
    for (const [id, s] of jobs) await stack.client.enqueue(s, { jobId: `mem-${id}` });
    for (const [id] of jobs) results[`mem-${id}`] = await stack.client.wait(`mem-${id}`, { timeoutMs: 60_000 });
    await cached.shutdown('next worker');
    // no memory cache: every pass reads the stored records from S3 in 1 MiB ranged GETs and decodes them
    await stack.startWorker({ KMFLEET_CHUNK_ROWS: '1000', KMFLEET_MEMORY_CACHE_MB: '0', KMFLEET_S3_READ_PART_MB: '1' });
    for (const [id, s] of jobs.filter(([id]) => id !== 'npy' && id !== 'u')) await stack.client.enqueue(s, { jobId: `s3-${id}` });
    for (const [id] of jobs.filter(([id]) => id !== 'npy' && id !== 'u')) results[`s3-${id}`] = await stack.client.wait(`s3-${id}`, { timeoutMs: 60_000 });

    for (const [id, , reference] of jobs) {
      if (id !== reference) await expectSameJobOutputs(stack, 'fmt', results, `mem-${reference}`, [`mem-${id}`, `s3-${id}`], { rows: ROWS, dims: DIMS });
    }
    // what came from S3: the stored records, not the delivered float32 rows (once into memory; without the memory
    // cache, at least once, plus the init's sampled rows)
    const stored = { fvecs: ROWS * (4 + DIMS * 4), bvecs: ROWS * (4 + DIMS), npz: ROWS * DIMS * 4 };
    for (const [id, bytes] of Object.entries(stored)) {
      expect(results[`mem-${id}`].timings.s3BytesRead, id).toBe(bytes);
      expect(results[`s3-${id}`].timings.s3BytesRead, id).toBeGreaterThanOrEqual(bytes);
      expect(results[`s3-${id}`].timings.s3Requests, id).toBeGreaterThanOrEqual(Math.floor(bytes / (1 << 20)));
    }
  });

  it('worker jobs on bad files fail at once, naming the problem', async () => {
    const cases: [string, { uri: string; format: 'npz' | 'fvecs'; member?: string }, RegExp][] = [
      ['bad-cut', { uri: 's3://data/cut.fvecs', format: 'fvecs' }, /fvecs file of 251990 bytes is not a whole number of 6-dim records/],
      ['bad-deflated', { uri: 's3://data/xc.npz', format: 'npz' }, /\.npz member arr_0\.npy is deflated .*np\.savez \(not np\.savez_compressed\)/],
      ['bad-member', { uri: 's3://data/x.npz', format: 'npz', member: 'vectors' }, /\.npz has no member "vectors" \(it has: ids, emb\)/],
      ['bad-npy-as-npz', { uri: 's3://data/x.npy', format: 'npz' }, /not a \.npz \(zip\) archive/],
    ];
    await expectFailsAtOnce(stack, 'fmt', K, cases);
  });
});
