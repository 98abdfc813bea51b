/**
 * An Arrow IPC embedding column — the file format (FixedSizeList<float>) and the stream format (List<float>) —
 * clusters bitwise like the same rows given as .npy, through `kmfleet fit` (the real CLI) and through worker jobs
 * (real redis-server, s3rver, worker) from the memory cache and straight from S3 in ranged GETs; bad files fail at
 * once naming the problem (exit 2 in the CLI; one attempt on the queue). The rows are numpy's (/usr/bin/python3); the
 * Arrow files are written by @uwdata/flechette, with record batches that do not line up with the engine's chunks.
 * Compressed files are pyarrow's (test/fixtures/pyarrow/make.py: write_feather's default LZ4, and a ZSTD stream),
 * clustered like the .npy that numpy computes here from make.py's formula.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { encodeArrow, rowsOf } from '../helpers/arrow.js';
import { blobsPython, ensureDistBuilt, expectFailsAtOnce, expectSameJobOutputs, kmfleet, npyData, startStack, type Stack } from './pipeline-fixture.js';

const ROWS = 9_000;
const DIMS = 6;
const K = 7;
const BATCH = 2_500;
const PYARROW = join(import.meta.dirname, '..', 'fixtures', 'pyarrow');
/** make.py's clusters, as pyarrow wrote them compressed */
const COMPRESSED = ['clusters-lz4.feather', 'clusters-zstd.arrows'];
const CLUSTER_ROWS = 3_000;


describe('dataset format: arrow', () => {
  let dir: string;
  let stack: Stack;
  beforeAll(async () => {
    ensureDistBuilt();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-arrow-'));
    execFileSync('/usr/bin/python3', ['-c', [
      ...blobsPython(ROWS, DIMS, K),
      // make.py's clusters
      'i = np.arange(3000)[:, None]',
      'j = np.arange(6)[None, :]',
      'np.save(sys.argv[1] + "/clusters.npy", (((i * 7) % 5) * 8 + (((i * 131 + j * 71) % 64) / 32 - 1) * (1 + (j % 2))).astype(np.float32))',
    ].join('\n'), dir]);
    for (const f of COMPRESSED) writeFileSync(join(dir, f), readFileSync(join(PYARROW, f)));
    // the ZSTD stream with record batch 1's values buffer (its 4th frame) damaged: a reserved bit of its header set
    const damaged = readFileSync(join(PYARROW, 'clusters-zstd.arrows'));
    let at = -1;
    for (let n = 0; n < 4; n++) at = damaged.indexOf(Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), at + 1);
    damaged[at + 4] |= 0x08;
    writeFileSync(join(dir, 'damaged-zstd.arrows'), damaged);
    const x = decodeNpy(readFileSync(join(dir, 'x.npy'))).data as Float32Array;
    const ids = Array.from({ length: ROWS }, (_, i) => i);
    const lists = rowsOf(x, DIMS);
    const id = { name: 'id', data: ids, scalar: 'int32' as const };
    writeFileSync(join(dir, 'x.arrow'), encodeArrow([id, { name: 'emb', data: lists, list: 'FixedSizeList', dims: DIMS }], { format: 'file', batchRows: BATCH }));
    writeFileSync(join(dir, 'x.arrows'), encodeArrow([id, { name: 'emb', data: lists, list: 'List' }], { format: 'stream', batchRows: BATCH }));
    const ragged = lists.map((r, i) => (i === 7_777 ? r.slice(0, DIMS - 1) : r));
    writeFileSync(join(dir, 'ragged.arrows'), encodeArrow([{ name: 'emb', data: ragged, list: 'List' }], { format: 'stream', batchRows: BATCH }));
    stack = await startStack();
    for (const f of ['x.npy', 'x.arrow', 'x.arrows', 'ragged.arrows', 'clusters.npy', ...COMPRESSED, 'damaged-zstd.arrows']) await stack.s3.put('data', f, readFileSync(join(dir, f)));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const common = ['--k', String(K), '--seed', '3', '--max-iter', '100', '--chunk-rows', '1000', '--threads', '2', '--backend', 'cpu', '--json'];
  const fit = (input: string, out: string, extra: string[] = []) => kmfleet(['fit', '--input', join(dir, input), '--out', join(dir, out), ...common, ...extra]);

  it('kmfleet fit: the same centroids and assignments as the .npy, from the file and the stream format, LZ4 or ZSTD compressed too; bad files exit 2 naming the problem', () => {
    for (const [npyInput, inputs] of [['x.npy', ['x.arrow', 'x.arrows']], ['clusters.npy', COMPRESSED]] as const) {
      const npy = fit(npyInput, `fit-${npyInput}`);
      expect(npy.code, npy.stderr).toBe(0);
      const a = JSON.parse(npy.stdout.trim().split('\n').pop()!);
      for (const input of inputs) {
        const r = fit(input, `fit-${input}`, ['--column', 'emb']);
        expect(r.code, r.stderr).toBe(0);
        for (const f of ['centroids.npy', 'assignments.npy']) {
          expect(npyData(join(dir, `fit-${input}`, f)).equals(npyData(join(dir, `fit-${npyInput}`, f))), `${input} ${f}`).toBe(true);
        }
        const b = JSON.parse(r.stdout.trim().split('\n').pop()!);
        expect(b.iterations, input).toBe(a.iterations);
        expect(b.input, input).toMatchObject({ format: 'arrow', column: 'emb', dtype: 'f32' });
      }
    }

    const refused: [string, string[], RegExp][] = [
      ['x.arrow', [], /^kmfleet: error: Arrow IPC file has 2 columns: say which one .*: id, emb/m],
      ['x.arrows', ['--column', 'vectors'], /^kmfleet: error: Arrow IPC stream has no column "vectors" \(it has: id, emb\)/m],
      ['x.arrow', ['--column', 'id'], /^kmfleet: error: Arrow column "id" is Int32, not a list of floats/m],
      ['ragged.arrows', [], /^kmfleet: error: Arrow column "emb" row 7777 has 5 values, not the 6 of row 0/m],
      ['x.npy', ['--format', 'arrow'], /^kmfleet: error: not an Arrow IPC file or stream/m],
      ['damaged-zstd.arrows', [], /^kmfleet: error: Arrow IPC stream record batch 1 \(rows 700\.\.1399\) cannot be decoded: a buffer compressed with ZSTD \(\d+ bytes\) does not decode/m],
    ];
    for (const [input, extra, message] of refused) {
      const r = fit(input, 'fit-no', extra);
      expect(r.code, `${input} ${extra.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr, input).toMatch(message);
    }
  });

  it('worker jobs: the same outputs as the .npy, from the memory cache and straight from S3, LZ4 or ZSTD compressed too; bad files fail in one attempt', async () => {
    const spec = (dataset: Record<string, unknown>) => ({
      // init random: without a memory cache the job then reads S3RowSource itself
      dataset, k: K, init: 'random' as const, seed: 3, maxIter: 100, backend: 'cpu' as const, output: 's3://out/arrow',
    });
    const file = spec({ uri: 's3://data/x.arrow', format: 'arrow', column: 'emb' });
    const stream = spec({ uri: 's3://data/x.arrows', format: 'arrow', column: 'emb' });
    const lz4 = spec({ uri: 's3://data/clusters-lz4.feather', format: 'arrow', column: 'emb' });
    const zstd = spec({ uri: 's3://data/clusters-zstd.arrows', format: 'arrow' });
    const cached = await stack.startWorker({ KMFLEET_CHUNK_ROWS: '1000' });
    await stack.client.enqueue(spec({ uri: 's3://data/x.npy' }), { jobId: 'mem-npy' });
    await stack.client.enqueue(file, { jobId: 'mem-file' });
    await stack.client.enqueue(stream, { jobId: 'mem-stream' });
    await stack.client.enqueue(spec({ uri: 's3://data/clusters.npy' }), { jobId: 'mem-clusters-npy' });
    await stack.client.enqueue(lz4, { jobId: 'mem-lz4' });
    await stack.client.enqueue(zstd, { jobId: 'mem-zstd' });
    const results: Record<string, Awaited<ReturnType<Stack['client']['wait']>>> = {};
    for (const id of ['mem-npy', 'mem-file', 'mem-stream', 'mem-clusters-npy', 'mem-lz4', 'mem-zstd']) results[id] = await stack.client.wait(id, { timeoutMs: 60_000 });
    await cached.shutdown('next worker');
    // no memory cache: every pass reads and decodes whole record batches through ranged GETs
    await stack.startWorker({ KMFLEET_CHUNK_ROWS: '1000', KMFLEET_MEMORY_CACHE_MB: '0', KMFLEET_S3_READ_PART_MB: '1' });
    await stack.client.enqueue(file, { jobId: 's3-file' });
    await stack.client.enqueue(stream, { jobId: 's3-stream' });
    await stack.client.enqueue(lz4, { jobId: 's3-lz4' });
    await stack.client.enqueue(zstd, { jobId: 's3-zstd' });
    for (const id of ['s3-file', 's3-stream', 's3-lz4', 's3-zstd']) results[id] = await stack.client.wait(id, { timeoutMs: 60_000 });

    const sameAs = [
      ['mem-npy', ['mem-file', 'mem-stream', 's3-file', 's3-stream'], ROWS],
      ['mem-clusters-npy', ['mem-lz4', 'mem-zstd', 's3-lz4', 's3-zstd'], CLUSTER_ROWS],
    ] as const;
    for (const [npyJob, jobs, rows] of sameAs) {
      await expectSameJobOutputs(stack, 'arrow', results, npyJob, jobs, { rows, dims: DIMS });
      for (const job of jobs) expect(results[job].timings.s3Requests, job).toBeGreaterThan(0);
    }
    // the record batches' GETs are counted: at least the embedding column's bytes came from S3
    for (const job of ['mem-file', 'mem-stream', 's3-file', 's3-stream']) expect(results[job].timings.s3BytesRead, job).toBeGreaterThan(ROWS * DIMS * 4 * 0.5);
    // without a memory cache the record batches are read again for what the engine's host tier does not hold
    expect(results['s3-file'].timings.s3BytesRead).toBeGreaterThan(results['mem-file'].timings.s3BytesRead);
    expect(results['s3-stream'].timings.s3BytesRead).toBeGreaterThan(results['mem-stream'].timings.s3BytesRead);

    const cases: [string, Record<string, unknown>, RegExp][] = [
      ['bad-ragged', { uri: 's3://data/ragged.arrows', format: 'arrow' }, /Arrow column "emb" row 7777 has 5 values, not the 6 of row 0/],
      ['bad-column', { uri: 's3://data/x.arrow', format: 'arrow', column: 'vectors' }, /Arrow IPC file has no column "vectors" \(it has: id, emb\)/],
      ['bad-npy-as-arrow', { uri: 's3://data/x.npy', format: 'arrow' }, /not an Arrow IPC file or stream/],
      ['bad-zstd', { uri: 's3://data/damaged-zstd.arrows', format: 'arrow' }, /Arrow IPC stream record batch 1 \(rows 700\.\.1399\) cannot be decoded: a buffer compressed with ZSTD/],
    ];
    await expectFailsAtOnce(stack, 'arrow', K, cases);
  });
});
