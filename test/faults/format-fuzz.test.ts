/**
 * Fuzzer for the container formats as `kmfleet fit` and a worker open them (LocalFileSource: .npz stored and deflated,
 * Parquet, Arrow IPC file and stream, fvecs, bvecs): valid files written by numpy, hyparquet-writer and flechette,
 * then mutated — bytes overwritten, 4- and 8-byte fields set to huge or negative numbers, cut short, spliced. Every case
 * must open and read all its rows, or fail with a DatasetFormatError that says something: no other exception type (a
 * TypeError or RangeError from deep inside a decoder names nothing a user can act on), no hang (a time budget per
 * case), and nothing read past what the file claims.
 *
 * Seeded: KMFLEET_FUZZ_SEED=<n> replays a run, KMFLEET_FUZZ_CASES=<n> changes the count. The seed and the failing
 * case (seed file, mutation, bytes in hex when short) are printed on failure.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { DatasetFormatError } from '../../core/formats/errors.js';
import { encodeArrow, LZ4_FRAME, rowsOf } from '../helpers/arrow.js';
import { asLists, encodeParquet } from '../helpers/parquet.js';
import { Rng } from '../helpers/reference.js';
import { encodeBvecs, encodeFvecs } from '../helpers/vecs.js';

const SEED = Number(process.env.KMFLEET_FUZZ_SEED ?? (Date.now() % 2 ** 31));
const CASES = Number(process.env.KMFLEET_FUZZ_CASES ?? 10_000);
/** a case's open and read together; a decoder that loops on a lying length takes far longer */
const CASE_BUDGET_MS = 2000;
/** rows and bytes read per case at most (a mutated count may claim billions of rows of a compressed file) */
const READ_ROWS = 4096;
const READ_BYTES = 64 * 1024 * 1024;

interface SeedFile {
  name: string;
  bytes: Buffer;
}

describe(`container format fuzzing (seed ${SEED}, ${CASES} cases; replay with KMFLEET_FUZZ_SEED)`, () => {
  let dir: string;
  const seeds: SeedFile[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-format-fuzz-'));
    const rows = 37, dims = 6;
    const rng = new Rng(7);
    const values = Float32Array.from({ length: rows * dims }, () => rng.uniform() * 2 - 1);
    const py = spawnSync('python3', ['-c', [
      'import numpy as np, sys',
      'd = sys.argv[1]',
      `x = np.random.default_rng(3).standard_normal((${rows}, ${dims})).astype(np.float32)`,
      'np.savez(d + "/stored.npz", emb=x, ids=np.arange(len(x)))',
      'np.savez_compressed(d + "/deflated.npz", x)',
    ].join('\n'), dir], { encoding: 'utf8' });
    if (py.status !== 0) throw new Error(`numpy could not write the .npz seeds: ${py.stderr}`);
    seeds.push({ name: 'stored.npz', bytes: readFileSync(join(dir, 'stored.npz')) });
    seeds.push({ name: 'deflated.npz', bytes: readFileSync(join(dir, 'deflated.npz')) });
    seeds.push({ name: 'lists.parquet', bytes: encodeParquet([{ name: 'emb', data: asLists(values, dims), element: 'FLOAT' }], 16) });
    seeds.push({ name: 'fixed.arrow', bytes: encodeArrow([{ name: 'emb', data: rowsOf(values, dims), list: 'FixedSizeList', element: 'f32', dims }], { format: 'file', batchRows: 16 }) });
    seeds.push({
      name: 'lists-lz4.arrows',
      bytes: encodeArrow([{ name: 'emb', data: rowsOf(values, dims), list: 'List', element: 'f32' }], { format: 'stream', batchRows: 16, compression: LZ4_FRAME }),
    });
    seeds.push({ name: 'rows.fvecs', bytes: encodeFvecs(values, dims) });
    seeds.push({ name: 'rows.bvecs', bytes: encodeBvecs(Uint8Array.from(values, (v) => Math.floor((v + 1) * 127)), dims) });
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** One mutation of `b` (a copy), and what it was. */
  function mutate(b: Buffer, r: () => number): { bytes: Buffer; what: string } {
    const out = Buffer.from(b);
    const at = () => Math.floor(r() * out.length);
    const m = r();
    if (m < 0.3) {
      const n = 1 + Math.floor(r() * 8);
      const where: number[] = [];
      for (let i = 0; i < n; i++) {
        const p = at();
        out[p] = Math.floor(r() * 256);
        where.push(p);
      }
      return { bytes: out, what: `bytes set at ${where.join(',')}` };
    }
    if (m < 0.6) {
      // a length, count or offset field made huge, negative or zero
      const p = Math.max(0, Math.min(out.length - 8, at()));
      const v = [0xffffffff, 0x7fffffff, 0x80000000, 0, 1, 0x10000, out.length, out.length + 1][Math.floor(r() * 8)];
      if (r() < 0.7) out.writeUInt32LE(v >>> 0, p);
      else out.writeBigUInt64LE(r() < 0.5 ? 0xffffffffffffffffn : BigInt(v) << 20n, p);
      return { bytes: out, what: `field at ${p} set to ${v}` };
    }
    if (m < 0.8) {
      const n = Math.floor(r() * out.length);
      return { bytes: out.subarray(0, n), what: `cut to ${n} bytes` };
    }
    // a stretch repeated or dropped: offsets past it all shift
    const p = at(), len = 1 + Math.floor(r() * 64);
    const spliced = r() < 0.5
      ? Buffer.concat([out.subarray(0, p), out.subarray(p, p + len), out.subarray(p)])
      : Buffer.concat([out.subarray(0, p), out.subarray(p + len)]);
    return { bytes: spliced, what: `${len} bytes at ${p} ${spliced.length > out.length ? 'repeated' : 'dropped'}` };
  }

  it('the damaged files the fuzzing found are refused at once: vectors, a page header field, a run, a Snappy literal', async () => {
    const found: { seed: () => SeedFile; set?: [number, number][]; drop?: [number, number]; refusal: RegExp }[] = [
      // a record batch's vector lengths: flechette built a list as long as they said (4 s and 450 MB; a V8 abort)
      { seed: () => seeds.find((f) => f.name === 'fixed.arrow')!, set: [[886, 104]], refusal: /record batch 1 is damaged/ },
      { seed: () => seeds.find((f) => f.name === 'fixed.arrow')!, set: [[1391, 63]], refusal: /record batch 2 is damaged/ },
      // a v2 data page without its repetition levels' length: hyparquet decoded levels until V8 aborted
      { seed: () => seeds.find((f) => f.name === 'lists.parquet')!, set: [[24, 132]], refusal: /page at byte 4 has no level lengths/ },
      // a page's repetition levels cut to one byte: a run in them said more values than the page holds, and hyparquet
      // wrote them all (a V8 abort)
      { seed: () => seeds.find((f) => f.name === 'lists.parquet')!, set: [[25, 2]], refusal: /page at byte 4 has a run/ },
      // a Snappy literal length past 2^31: hyparquet's decoder read it as negative and walked backwards for seconds
      { seed: () => seeds.find((f) => f.name === 'lists.parquet')!, set: [[475, 252]], refusal: /Snappy-compressed page is damaged/ },
      // a schema's vtable size cut short by a byte: flechette still read the metadata vector behind it, 1.6 billion long
      { seed: () => seeds.find((f) => f.name === 'lists-lz4.arrows')!, drop: [41, 36], refusal: /not an Arrow IPC file or stream/ },
    ];
    for (const { seed, set = [], drop, refusal } of found) {
      const original = seed().bytes;
      const bytes = drop ? Buffer.concat([original.subarray(0, drop[0]), original.subarray(drop[0] + drop[1])]) : Buffer.from(original);
      for (const [at, value] of set) bytes[at] = value;
      const path = join(dir, `found-${seed().name}`);
      writeFileSync(path, bytes);
      const t0 = performance.now();
      const err = await (async () => {
        const source = await LocalFileSource.open(path);
        try {
          await source.read(0, source.rows, Buffer.alloc(source.rows * source.rowBytes));
        } finally {
          await source.close();
        }
      })().catch((e: unknown) => e);
      expect(err, `${seed().name} ${JSON.stringify({ set, drop })}`).toBeInstanceOf(DatasetFormatError);
      expect((err as Error).message).toMatch(refusal);
      expect(performance.now() - t0).toBeLessThan(CASE_BUDGET_MS);
    }
  });

  it('every mutated file opens and reads, or fails with a DatasetFormatError; no other error, no hang', async () => {
    const rng = new Rng(SEED);
    const r = () => rng.uniform();
    const outcomes = { read: 0, refused: 0 };
    let slowest = 0;
    for (let c = 0; c < CASES; c++) {
      const seed = seeds[Math.floor(r() * seeds.length)];
      const { bytes, what } = mutate(seed.bytes, r);
      const path = join(dir, `case-${seed.name}`);
      writeFileSync(path, bytes);
      const describeCase = () => `seed ${SEED}, case ${c}: ${seed.name}, ${what}${bytes.length <= 2048 ? `\n  bytes: ${bytes.toString('hex')}` : ''}`;
      const t0 = performance.now();
      let source: LocalFileSource | undefined;
      try {
        source = await LocalFileSource.open(path);
        // a mutated FixedSizeList size may claim rows of gigabytes: such a file opens, and fails when its rows are read
        const rows = Math.min(source.rows, READ_ROWS, Math.floor(READ_BYTES / source.rowBytes));
        expect(Number.isSafeInteger(source.rows) && source.rows >= 0, describeCase()).toBe(true);
        expect(Number.isSafeInteger(source.dims) && source.dims > 0, describeCase()).toBe(true);
        const target = Buffer.alloc(rows * source.rowBytes);
        if (rows > 0) await source.read(0, rows, target);
        if (source.rows > rows && rows > 0) await source.read(source.rows - 1, 1, Buffer.alloc(source.rowBytes));
        outcomes.read++;
      } catch (err) {
        if (!(err instanceof DatasetFormatError) || err.message.length === 0) {
          throw new Error(`${(err as Error)?.name}: ${(err as Error)?.message}\n  ${describeCase()}\n  ${(err as Error)?.stack?.split('\n').slice(1, 6).join('\n  ')}`);
        }
        outcomes.refused++;
      } finally {
        await source?.close();
      }
      const ms = performance.now() - t0;
      slowest = Math.max(slowest, ms);
      if (ms > CASE_BUDGET_MS) throw new Error(`a case took ${Math.round(ms)} ms\n  ${describeCase()}`);
    }
    // both outcomes really happen: the mutations reach the decoders' success paths and their checks
    expect(outcomes.read).toBeGreaterThan(CASES / 50);
    expect(outcomes.refused).toBeGreaterThan(CASES / 10);
    if (process.env.KMFLEET_TEST_DEBUG) console.log({ seed: SEED, ...outcomes, slowestMs: Math.round(slowest) });
  }, 600_000);
});
