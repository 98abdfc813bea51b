import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  DatasetFormatError,
  decodeNpy,
  encodeNpy,
  encodeNpyHeader,
  f16BitsToF32,
  f32ToF16Bits,
  npyHeaderLength,
  NpyWriter,
  parseNpyHeader,
  rawLayout,
} from '../../core/formats/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-npy-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A .npy file written by hand: magic, version, length field, dict text (padded to 64 with spaces + '\n'). */
function hand(major: number, dict: string, dataBytes = 0, opts: { pad?: boolean; rawText?: Buffer } = {}): Buffer {
  const prefix = major === 1 ? 10 : 12;
  const text = opts.rawText ?? Buffer.from(dict, 'latin1');
  let len = text.length + 1;
  if (opts.pad !== false) len = Math.ceil((prefix + len) / 64) * 64 - prefix;
  const head = Buffer.alloc(prefix + len, 0x20);
  Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, major, 0]).copy(head);
  if (major === 1) head.writeUInt16LE(len, 8);
  else head.writeUInt32LE(len, 8);
  text.copy(head, prefix);
  head[head.length - 1] = 0x0a;
  return Buffer.concat([head, Buffer.alloc(dataBytes)]);
}
const dict = (descr: string, shape: string, fortran = 'False') => `{'descr': '${descr}', 'fortran_order': ${fortran}, 'shape': ${shape}, }`;
const parse = (b: Buffer) => parseNpyHeader(b, b.length);
const fails = (b: Buffer, re: RegExp) => {
  expect(() => parse(b)).toThrow(DatasetFormatError);
  expect(() => parse(b)).toThrow(re);
};

describe('parseNpyHeader', () => {
  it('reads version 1.0, 2.0 and 3.0 headers', () => {
    for (const major of [1, 2, 3]) {
      const b = hand(major, dict('<f4', '(5, 3)'), 5 * 3 * 4);
      const l = parse(b);
      expect(l).toMatchObject({ dtype: 'f32', rows: 5, dims: 3, fortranOrder: false, rowBytes: 12 });
      expect(l.dataOffset).toBe(b.length - 60);
    }
    const f16 = hand(1, dict('<f2', '(7, 2)'), 7 * 2 * 2);
    expect(parse(f16)).toMatchObject({ dtype: 'f16', rows: 7, dims: 2, itemSize: 2, rowBytes: 4 });
  });

  it('accepts unpadded headers, double quotes, python 2 long ints and no trailing comma', () => {
    const b = hand(1, `{"shape": (4L, 2L), "fortran_order": False, "descr": "<f4"}`, 32, { pad: false });
    expect(parse(b)).toMatchObject({ rows: 4, dims: 2 });
  });

  it('needs only the header bytes plus the file size (the remote reader path)', () => {
    const b = hand(2, dict('<f4', '(1000, 8)'), 1000 * 8 * 4);
    const total = npyHeaderLength(b.subarray(0, 12))!;
    expect(total).toBe(128);
    expect(npyHeaderLength(b.subarray(0, 9))).toBeNull(); // v2 length field not complete yet
    expect(parseNpyHeader(b.subarray(0, total), b.length)).toMatchObject({ rows: 1000, dims: 8, dataOffset: 128 });
    expect(() => parseNpyHeader(b.subarray(0, 40), b.length)).toThrow(/needs 128 bytes but only 40/);
  });

  it('rejects every unsupported or inconsistent file with a message naming the problem', () => {
    fails(Buffer.from('PK\x03\x04 not an npy at all'), /magic/);
    fails(hand(4, dict('<f4', '(1, 1)'), 4), /version 4\.0/);
    fails(hand(1, dict('>f4', '(2, 2)'), 16), /big-endian/);
    fails(hand(1, dict('<f4', '(2, 2)', 'True'), 16), /Fortran/);
    fails(hand(1, dict('|O', '(2, 2)'), 16), /object/);
    fails(hand(1, dict('<f8', '(2, 2)'), 32), /'<f8' is not supported/);
    fails(hand(1, dict('<i4', '(2, 2)'), 16), /'<i4' is not supported/);
    fails(hand(1, `{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }`, 8), /structured/);
    fails(hand(1, dict('<f4', '(-2, 2)'), 16), /negative/);
    fails(hand(1, dict('<f4', '(99999999999999999999, 4)'), 16), /needs 1599999999999999999984 bytes/);
    fails(hand(1, dict('<f4', '(4611686018427387904, 4611686018427387904)'), 16), /bytes of data/);
    fails(hand(1, dict('<f4', '(3, 2)'), 20), /needs 24 bytes of data but the file has 20/);
    fails(hand(1, dict('<f4', '(3, 2)'), 28), /needs 24 bytes of data but the file has 28/);
    fails(hand(1, dict('<f4', '(6,)'), 24), /2-D/);
    fails(hand(1, dict('<f4', '(2, 3, 4)'), 96), /2-D/);
    fails(hand(1, dict('<f4', '(0, 4)'), 0), /no rows/);
    fails(hand(1, dict('<f4', '(4, 0)'), 0), /no dimensions/);
    fails(hand(1, `{'descr': '<f4', 'shape': (2, 2), }`, 16), /exactly the keys/);
    fails(hand(1, `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'extra': 1}`, 16), /malformed|exactly the keys/);
    fails(hand(1, `{'descr': '<f4' 'fortran_order': False}`, 16), /malformed/);
    fails(hand(3, '', 16, { rawText: Buffer.from(`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), } é`, 'utf8') }), /non-ASCII/);
    // header length pointing past the end of the file
    const past = hand(1, dict('<f4', '(1, 1)'), 4);
    past.writeUInt16LE(4000, 8);
    fails(past, /past the end of the file/);
    // an absurd u32 header length is refused before anything is allocated for it
    const huge = hand(2, dict('<f4', '(1, 1)'), 4);
    huge.writeUInt32LE(0xfffffff0, 8);
    fails(huge, /exceeds the 65536-byte limit/);
    fails(Buffer.from([0x93, 0x4e, 0x55]), /past the end|magic/);
  });

  it('reads files written by numpy (float32 and float16), and numpy reads ours', () => {
    const py = '/usr/bin/python3';
    try { execFileSync(py, ['-c', 'import numpy'], { stdio: 'ignore' }); } catch { return; } // covered by hand-written headers above
    const f4 = join(dir, 'np-f4.npy');
    const f2 = join(dir, 'np-f2.npy');
    execFileSync(py, ['-c', `import numpy as np
a = (np.arange(300 * 7, dtype=np.float32).reshape(300, 7) / 3).astype(np.float32)
np.save('${f4}', a); np.save('${f2}', a.astype(np.float16))`]);
    const b4 = readFileSync(f4);
    const l4 = parse(b4);
    expect(l4).toMatchObject({ dtype: 'f32', rows: 300, dims: 7 });
    const data = new Float32Array(b4.buffer.slice(b4.byteOffset + l4.dataOffset, b4.byteOffset + b4.length));
    expect(data[7 * 299 + 6]).toBe(Math.fround((300 * 7 - 1) / 3));
    const b2 = readFileSync(f2);
    expect(parse(b2)).toMatchObject({ dtype: 'f16', rows: 300, dims: 7 });
    const d2 = decodeNpy(b2);
    expect(d2.shape).toEqual([300, 7]);
    expect(d2.data[8]).toBeCloseTo(8 / 3, 2);

    const ours = join(dir, 'ours.npy');
    writeFileSync(ours, encodeNpy(new Int32Array([5, -1, 2147483647]), [3]));
    const out = execFileSync(py, ['-c', `import numpy as np; a = np.load('${ours}'); print(a.dtype, a.shape, a.tolist())`]).toString().trim();
    expect(out).toBe('int32 (3,) [5, -1, 2147483647]');
  });
});

describe('encodeNpy / decodeNpy', () => {
  it('round-trips float32, float64, int32 and int64 arrays with 64-byte aligned headers', () => {
    const f = new Float32Array([1.5, -2, 3.25, Number.MAX_VALUE > 0 ? 3.4e38 : 0, -0, 7]);
    const enc = encodeNpy(f, [2, 3]);
    expect(npyHeaderLength(enc)! % 64).toBe(0);
    const dec = decodeNpy(enc);
    expect(dec.descr).toBe('<f4');
    expect(dec.shape).toEqual([2, 3]);
    expect(Buffer.from((dec.data as Float32Array).buffer).equals(Buffer.from(f.buffer))).toBe(true);
    expect(decodeNpy(encodeNpy(new Float64Array([Math.PI]), [1, 1])).data[0]).toBe(Math.PI);
    expect(Array.from(decodeNpy(encodeNpy(new Int32Array([3, -4]), [2])).data)).toEqual([3, -4]);
    expect(decodeNpy(encodeNpy(new BigInt64Array([2n ** 40n]), [1])).data[0]).toBe(2n ** 40n);
    expect(parse(encodeNpy(f, [3, 2]))).toMatchObject({ rows: 3, dims: 2, dataOffset: 128 });
  });

  it('writes version 1.0 headers like numpy and checks the array against the shape', () => {
    const h = encodeNpyHeader('<f4', [1000, 8]);
    expect(h[6]).toBe(1);
    expect(h.length).toBe(128);
    expect(h.toString('latin1', 10)).toBe(`{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 8), }`.padEnd(117) + '\n');
    expect(() => encodeNpy(new Float32Array(3), [2, 2])).toThrow(RangeError);
  });

  it('refuses a truncated or oversized small file', () => {
    const enc = encodeNpy(new Float32Array(6), [2, 3]);
    expect(() => decodeNpy(enc.subarray(0, enc.length - 4))).toThrow(/needs 24 bytes of data but the file has 20/);
  });
});

describe('NpyWriter', () => {
  it('streams chunks after the header and reports size and sha256 of the file', async () => {
    const path = join(dir, 'stream.npy');
    const w = NpyWriter.toFile(path, '<i4', [10]);
    await w.write(new Int32Array([0, 1, 2, 3]));
    await w.write(new Int32Array([4, 5, 6]));
    await w.write(Buffer.from(new Int32Array([7, 8, 9]).buffer));
    const res = await w.close();
    const bytes = readFileSync(path);
    expect(res.bytes).toBe(bytes.length);
    expect(res.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    expect(Array.from(decodeNpy(bytes).data)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it('refuses to exceed the shape, and discards a file closed short', async () => {
    const path = join(dir, 'short.npy');
    const w = NpyWriter.toFile(path, '<f4', [2, 2]);
    await w.write(new Float32Array(3));
    await expect(w.write(new Float32Array(2))).rejects.toThrow(/exceed/);
    await expect(w.close()).rejects.toThrow(/wrote 12 of the 16/);
    expect(existsSync(path)).toBe(false);
  });
});

describe('raw formats', () => {
  it('derives rows from the size and refuses partial rows', () => {
    expect(rawLayout('f32', 4 * 8 * 10, 8)).toMatchObject({ rows: 10, dims: 8, dataOffset: 0, rowBytes: 32 });
    expect(rawLayout('f16', 2 * 3 * 5, 3)).toMatchObject({ rows: 5, rowBytes: 6 });
    expect(() => rawLayout('f32', 100, 8)).toThrow(/not a whole number of 8-dim rows \(32 bytes each; 4 bytes left over\)/);
    expect(() => rawLayout('f32', 100, undefined)).toThrow(/dims/);
    expect(() => rawLayout('f16', 0, 4)).toThrow(/empty/);
    expect(() => rawLayout('f32', 64, 0)).toThrow(DatasetFormatError);
  });
});

describe('float16', () => {
  it('decode then encode is the identity on every non-NaN half, and rounding matches IEEE', () => {
    for (let h = 0; h < 0x10000; h++) {
      const v = f16BitsToF32(h);
      if (Number.isNaN(v)) continue;
      expect(f32ToF16Bits(v)).toBe(h);
    }
    expect(f32ToF16Bits(1)).toBe(0x3c00);
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00); // rounds up to inf
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie to even
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(f32ToF16Bits(2 ** -25)).toBe(0); // tie to even at the smallest subnormal
    expect(f32ToF16Bits(3 * 2 ** -26)).toBe(1);
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(NaN)))).toBe(true);
  });
});
