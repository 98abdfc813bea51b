/**
 * The opt-in float64 → float32 conversion below the integration tests: the rounding (numpy's astype, checked against
 * /usr/bin/python3's numpy on the same doubles), the aligned and unaligned paths, the header rules with and without
 * `convert`, a local file read in pieces, and the spec field's rules.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SpecValidationError } from '../../producer/errors/index.js';
import { parseJobSpec } from '../../producer/spec.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { convertF64ToF32, DatasetFormatError, encodeNpy, parseNpyHeader } from '../../core/formats/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-f64-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Doubles that are not floats: random magnitudes, ties, subnormals, the edges of float32's range. */
function awkwardDoubles(n: number): Float64Array {
  const out = new Float64Array(n);
  let s = 12345;
  const rnd = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32);
  for (let i = 0; i < n; i++) out[i] = (rnd() - 0.5) * 10 ** Math.floor(rnd() * 20 - 10);
  out.set([1 + 2 ** -24, 1 + 3 * 2 ** -24, -(1 + 2 ** -24), 1e-45, 1.5e-45, 3.4028234663852886e38, 3.4028235677973366e38, 3.5e38, -3.5e38, 0, -0], 0);
  return out;
}

describe('float64 → float32', () => {
  it('rounds as numpy astype(np.float32) does, ties to even, overflow to ±Infinity', () => {
    const x = awkwardDoubles(4096);
    const got = new Float32Array(x.length);
    convertF64ToF32(new Uint8Array(x.buffer), new Uint8Array(got.buffer), x.length);
    writeFileSync(join(dir, 'x.f64'), x);
    execFileSync('/usr/bin/python3', ['-c', `import numpy as np; np.fromfile('${join(dir, 'x.f64')}', '<f8').astype(np.float32).tofile('${join(dir, 'x.f32')}')`]);
    const numpy = readFileSync(join(dir, 'x.f32'));
    expect(Buffer.from(got.buffer).equals(numpy)).toBe(true);
    expect(got[0]).toBe(1); // the tie 1 + 2^-24 goes to the even neighbour
    expect(got[1]).toBe(1 + 2 ** -22);
    expect(got[7]).toBe(Infinity);
    expect(got[8]).toBe(-Infinity);
  });

  it('gives the same bytes through unaligned buffers', () => {
    const x = awkwardDoubles(257);
    const aligned = new Float32Array(x.length);
    convertF64ToF32(new Uint8Array(x.buffer), new Uint8Array(aligned.buffer), x.length);
    const src = Buffer.alloc(x.byteLength + 3);
    Buffer.from(x.buffer).copy(src, 3);
    const dst = Buffer.alloc(aligned.byteLength + 1);
    convertF64ToF32(src.subarray(3), dst.subarray(1), x.length);
    expect(dst.subarray(1).equals(Buffer.from(aligned.buffer))).toBe(true);
    expect(() => convertF64ToF32(src, dst, x.length + 10)).toThrow(RangeError);
  });

  it("refuses '<f8' unless asked to convert, then delivers float32 rows", () => {
    const npy = encodeNpy(new Float64Array(6), [3, 2]);
    expect(() => parseNpyHeader(npy, npy.length)).toThrow(DatasetFormatError);
    expect(() => parseNpyHeader(npy, npy.length)).toThrow(/'<f8' is not supported .*dataset\.convert: "f64-to-f32".*--convert f64-to-f32/);
    expect(parseNpyHeader(npy, npy.length, { convert: 'f64-to-f32' })).toMatchObject({
      dtype: 'f32', rows: 3, dims: 2, itemSize: 4, rowBytes: 8, storedRowBytes: 16, convert: 'f64-to-f32',
    });
    // the data size is checked against the stored dtype
    expect(() => parseNpyHeader(npy.subarray(0, npy.length - 8), npy.length - 8, { convert: 'f64-to-f32' })).toThrow(/needs 48 bytes/);
    // a float32 file asked to convert is read as it is
    const f32 = encodeNpy(new Float32Array(6), [3, 2]);
    expect(parseNpyHeader(f32, f32.length, { convert: 'f64-to-f32' })).toMatchObject({ dtype: 'f32', storedRowBytes: 8 });
    expect(parseNpyHeader(f32, f32.length, { convert: 'f64-to-f32' }).convert).toBeUndefined();
    const be = encodeNpy(new Float64Array(6), [3, 2]);
    be.write("'>f8'", be.indexOf("'<f8'"), 'latin1');
    expect(() => parseNpyHeader(be, be.length, { convert: 'f64-to-f32' })).toThrow(/big-endian/);
  });

  it('a local .npy of float64 reads, in any pieces, as its float32 cast', async () => {
    const rows = 1000;
    const dims = 3;
    const x = awkwardDoubles(rows * dims).map((v) => (Math.abs(v) > 1e30 ? 1 : v));
    writeFileSync(join(dir, 'd.npy'), encodeNpy(x, [rows, dims]));
    await expect(LocalFileSource.open(join(dir, 'd.npy'))).rejects.toThrow(/'<f8' is not supported/);
    const src = await LocalFileSource.open(join(dir, 'd.npy'), { convert: 'f64-to-f32' });
    try {
      expect(src).toMatchObject({ rows, dims, dtype: 'f32', rowBytes: 12, storedRowBytes: 24 });
      expect(src.describe()).toMatch(/npy <f8 read as <f4, 1000 × 3/);
      const all = Buffer.alloc(rows * 12);
      for (let first = 0; first < rows; first += 333) await src.read(first, Math.min(333, rows - first), all.subarray(first * 12));
      expect(all.equals(Buffer.from(Float32Array.from(x).buffer))).toBe(true);
    } finally {
      await src.close();
    }
  });

  it('is a spec field for npy datasets: one value, and not for raw formats', () => {
    const base = { k: 2, output: 's3://out' };
    expect(parseJobSpec({ ...base, dataset: { uri: 's3://data/x.npy', convert: 'f64-to-f32' } }).dataset.convert).toBe('f64-to-f32');
    expect(parseJobSpec({ ...base, dataset: { uri: 's3://data/x.npy' } }).dataset).not.toHaveProperty('convert');
    const bad = (dataset: unknown) => {
      try {
        parseJobSpec({ ...base, dataset });
      } catch (err) {
        expect(err).toBeInstanceOf(SpecValidationError);
        return (err as SpecValidationError).issues;
      }
      throw new Error('accepted');
    };
    expect(bad({ uri: 's3://data/x.npy', convert: 'f16-to-f32' })).toEqual([
      { path: 'dataset.convert', message: 'must be one of f64-to-f32 (got "f16-to-f32")' },
    ]);
    expect(bad({ uri: 's3://data/x.f32', format: 'f32', dims: 4, convert: 'f64-to-f32' })).toEqual([
      { path: 'dataset.convert', message: 'applies to npy, npz, parquet and arrow datasets only (format f32 is read as it is)' },
    ]);
  });
});
