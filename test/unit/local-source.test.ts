import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { DatasetFormatError, encodeF16, encodeNpy } from '../../core/formats/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-src-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const rows = 1000;
const dims = 5;
const values = Float32Array.from({ length: rows * dims }, (_, i) => i * 0.5 - 7);

describe('LocalFileSource', () => {
  it('reads any row range of a .npy file, concurrently, into the caller\'s buffer', async () => {
    const path = join(dir, 'a.npy');
    writeFileSync(path, encodeNpy(values, [rows, dims]));
    const src = await LocalFileSource.open(path);
    expect({ rows: src.rows, dims: src.dims, dtype: src.dtype, rowBytes: src.rowBytes }).toEqual({ rows, dims, dtype: 'f32', rowBytes: 20 });
    expect(src.describe()).toContain('1000 × 5');
    const ranges = [[0, 1], [999, 1], [17, 300], [500, 500], [0, 1000]];
    const bufs = ranges.map(([, c]) => Buffer.alloc(c * 20 + 8, 0xee));
    await Promise.all(ranges.map(([f, c], i) => src.read(f, c, bufs[i])));
    ranges.forEach(([f, c], i) => {
      const got = new Float32Array(bufs[i].buffer, bufs[i].byteOffset, c * dims);
      expect(Array.from(got)).toEqual(Array.from(values.subarray(f * dims, (f + c) * dims)));
      expect(bufs[i].subarray(c * 20).every((b) => b === 0xee)).toBe(true); // nothing written past the rows
    });
    await expect(src.read(999, 2, Buffer.alloc(40))).rejects.toThrow(/outside the dataset/);
    await expect(src.read(-1, 1, Buffer.alloc(20))).rejects.toThrow(/outside/);
    await expect(src.read(0, 2, Buffer.alloc(39))).rejects.toThrow(/smaller than 2 rows/);
    await src.close();
  });

  it('reads raw f32 and f16 files given dims, and .npy float16', async () => {
    const raw = join(dir, 'a.f32');
    writeFileSync(raw, Buffer.from(values.buffer));
    const src = await LocalFileSource.open(raw, { format: 'f32', dims });
    expect(src.rows).toBe(rows);
    const b = Buffer.alloc(20);
    await src.read(3, 1, b);
    expect(Array.from(new Float32Array(b.buffer, b.byteOffset, 5))).toEqual(Array.from(values.subarray(15, 20)));
    await src.close();

    const h = join(dir, 'a.f16');
    writeFileSync(h, encodeF16(values));
    const s16 = await LocalFileSource.open(h, { format: 'f16', dims });
    expect({ rows: s16.rows, dtype: s16.dtype, rowBytes: s16.rowBytes }).toEqual({ rows, dtype: 'f16', rowBytes: 10 });
    const b16 = Buffer.alloc(10);
    await s16.read(999, 1, b16);
    expect(b16.equals(encodeF16(values.subarray(4995, 5000)))).toBe(true);
    await s16.close();

    const n16 = join(dir, 'h.npy');
    const half = encodeF16(values);
    writeFileSync(n16, Buffer.concat([headerF2(rows, dims), half]));
    const s = await LocalFileSource.open(n16);
    expect(s.dtype).toBe('f16');
    const all = Buffer.alloc(rows * 10);
    await s.read(0, rows, all);
    expect(all.equals(half)).toBe(true);
    await s.close();
  });

  it('refuses bad files and bad options with DatasetFormatError', async () => {
    const raw = join(dir, 'b.f32');
    writeFileSync(raw, Buffer.alloc(4 * 5 * 3 + 4));
    await expect(LocalFileSource.open(raw, { format: 'f32', dims: 5 })).rejects.toThrow(/not a whole number of 5-dim rows/);
    await expect(LocalFileSource.open(raw)).rejects.toThrow(/cannot tell the format/);
    await expect(LocalFileSource.open(raw, { format: 'f32' })).rejects.toThrow(DatasetFormatError);
    const npy = join(dir, 'c.npy');
    writeFileSync(npy, encodeNpy(values, [rows, dims]).subarray(0, 500));
    await expect(LocalFileSource.open(npy)).rejects.toThrow(/needs 20000 bytes of data but the file has/);
    writeFileSync(npy, encodeNpy(values, [rows, dims]));
    await expect(LocalFileSource.open(npy, { dims: 4 })).rejects.toThrow(/has 5 dims, not the 4 given/);
    writeFileSync(npy, Buffer.alloc(0));
    await expect(LocalFileSource.open(npy)).rejects.toThrow(DatasetFormatError);
    await expect(LocalFileSource.open(join(dir, 'missing.npy'))).rejects.toThrow(/ENOENT/);
  });
});

function headerF2(r: number, d: number): Buffer {
  const h = encodeNpy(new Float32Array(0), [0]); // reuse the writer's padding, then patch the dict
  const dict = `{'descr': '<f2', 'fortran_order': False, 'shape': (${r}, ${d}), }`;
  const out = Buffer.alloc(h.length, 0x20);
  h.copy(out, 0, 0, 10);
  out.write(dict, 10, 'latin1');
  out[out.length - 1] = 0x0a;
  return out;
}
