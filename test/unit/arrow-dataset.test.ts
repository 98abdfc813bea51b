/**
 * Arrow IPC embedding columns (file and stream formats) through LocalFileSource: the rows delivered are bitwise the
 * rows of the same data as float32 (or float16) arrays, for ranges within and across record batches; bad files fail
 * with a DatasetFormatError naming the problem (at open, or for a row of another length, a null or a damaged compressed
 * buffer, at the read of its record batch). Files are written by @uwdata/flechette's writer (test/helpers/arrow.ts;
 * LZ4 frames by lz4js), and small ones by pyarrow (test/fixtures/pyarrow/make.py), the writer most users have: its
 * LZ4 and ZSTD buffers are read with the same rows as its uncompressed files.
 */
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { DatasetFormatError, encodeF16, f16BitsToF32 } from '../../core/formats/index.js';
import { encodeArrow, LZ4_FRAME, rowsOf, type ArrowColumn, type ArrowCompression } from '../helpers/arrow.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-arrow-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ROWS = 301;
const DIMS = 7;
const BATCH = 40;
const values = Float32Array.from({ length: ROWS * DIMS }, (_, i) => Math.sin(i) * 1e3 + i / 7);
const ranges = [[0, ROWS], [0, 1], [ROWS - 1, 1], [13, 200], [39, 2], [40, 40], [300, 1]] as const;
const FORMATS = [['file', 'arrow'], ['stream', 'arrows']] as const;

let n = 0;
function file(columns: ArrowColumn[], opts: { format?: 'file' | 'stream'; batchRows?: number; compression?: ArrowCompression; ext?: string } = {}): string {
  const format = opts.format ?? 'file';
  const path = join(dir, `t${n++}.${opts.ext ?? (format === 'file' ? 'arrow' : 'arrows')}`);
  writeFileSync(path, encodeArrow(columns, { format, batchRows: opts.batchRows ?? BATCH, compression: opts.compression }));
  return path;
}

const emb = (list: ArrowColumn['list'], data: unknown[] = rowsOf(values, DIMS), element: ArrowColumn['element'] = 'f32'): ArrowColumn =>
  ({ name: 'emb', data, list, element, dims: DIMS });

async function readRows(src: LocalFileSource, first: number, count: number): Promise<Buffer> {
  const out = Buffer.alloc(count * src.rowBytes);
  await src.read(first, count, out);
  return out;
}

async function expectFormatError(p: Promise<unknown>, message: RegExp): Promise<void> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(DatasetFormatError);
  expect((err as Error).message).toMatch(message);
}

const f32Bytes = (v: Float32Array, first: number, count: number) => Buffer.from(v.buffer, v.byteOffset + first * DIMS * 4, count * DIMS * 4);

describe('Arrow IPC embedding columns', () => {
  for (const [format, ext] of FORMATS) {
    for (const list of ['FixedSizeList', 'List', 'LargeList'] as const) {
      it(`${format} format (.${ext}), ${list}<float32>: every range, within and across record batches, in any order, is bitwise the float32 rows`, async () => {
        const src = await LocalFileSource.open(file([emb(list)], { format }));
        try {
          expect([src.format, src.rows, src.dims, src.dtype, src.column]).toEqual(['arrow', ROWS, DIMS, 'f32', 'emb']);
          expect(src.describe()).toContain('arrow column emb <f4');
          for (const [first, count] of [...ranges, ...[...ranges].reverse()]) {
            expect((await readRows(src, first, count)).equals(f32Bytes(values, first, count)), `${first}+${count}`).toBe(true);
          }
          const parts = await Promise.all([0, 50, 100, 150, 200, 250].map((f) => readRows(src, f, f === 250 ? ROWS - f : 50)));
          expect(Buffer.concat(parts).equals(f32Bytes(values, 0, ROWS))).toBe(true);
        } finally {
          await src.close();
        }
      });
    }
  }

  it('.feather is the file format; one batch of every row works too', async () => {
    const src = await LocalFileSource.open(file([emb('FixedSizeList')], { ext: 'feather', batchRows: ROWS }));
    expect([src.format, src.rows]).toEqual(['arrow', ROWS]);
    expect((await readRows(src, 0, ROWS)).equals(f32Bytes(values, 0, ROWS))).toBe(true);
    await src.close();
  });

  it('LZ4_FRAME-compressed batches (lz4js\'s frames), both formats, every list type, a compressed dictionary beside: the same rows', async () => {
    // values from a few floats compress; flechette stores a buffer that does not shrink as it is (length -1)
    const few = Float32Array.from({ length: ROWS * DIMS }, (_, i) => Math.round(Math.sin(i) * 4) / 4);
    for (const [format] of FORMATS) {
      for (const list of ['FixedSizeList', 'List', 'LargeList'] as const) {
        const path = file([emb(list, rowsOf(few, DIMS))], { format, compression: LZ4_FRAME });
        const plain = file([emb(list, rowsOf(few, DIMS))], { format });
        expect(statSync(path).size, `${format} ${list}: compressed`).toBeLessThan(statSync(plain).size * 0.8);
        const src = await LocalFileSource.open(path);
        for (const [first, count] of [...ranges, ...[...ranges].reverse()]) {
          expect((await readRows(src, first, count)).equals(f32Bytes(few, first, count)), `${format} ${list} ${first}+${count}`).toBe(true);
        }
        await src.close();
      }
      const path = file([
        { name: 'tag', data: Array.from({ length: ROWS }, (_, i) => `tag number ${i % 5}`), scalar: 'dictionary' },
        { ...emb('FixedSizeList'), name: 'vec' },
      ], { format, compression: LZ4_FRAME });
      const src = await LocalFileSource.open(path, { column: 'vec' });
      expect((await readRows(src, 0, ROWS)).equals(f32Bytes(values, 0, ROWS)), format).toBe(true);
      await src.close();
    }
  });

  it('picks --column among several (a dictionary-encoded column beside it too); without it, names the columns', async () => {
    for (const [format] of FORMATS) {
      const path = file([
        { name: 'id', data: Array.from({ length: ROWS }, (_, i) => i), scalar: 'int32' },
        { name: 'tag', data: Array.from({ length: ROWS }, (_, i) => `t${i % 5}`), scalar: 'dictionary' },
        { ...emb('FixedSizeList'), name: 'vec' },
      ], { format });
      const what = format === 'file' ? 'Arrow IPC file' : 'Arrow IPC stream';
      await expectFormatError(LocalFileSource.open(path), new RegExp(`${what} has 3 columns: say which one .*dataset\\.column.*--column.*: id, tag, vec`));
      await expectFormatError(LocalFileSource.open(path, { column: 'nope' }), /no column "nope" \(it has: id, tag, vec\)/);
      await expectFormatError(LocalFileSource.open(path, { column: 'id' }), /column "id" is Int32, not a list of floats/);
      await expectFormatError(LocalFileSource.open(path, { column: 'tag' }), /column "tag" is Dictionary, not a list of floats/);
      const src = await LocalFileSource.open(path, { column: 'vec' });
      expect((await readRows(src, 0, ROWS)).equals(f32Bytes(values, 0, ROWS)), format).toBe(true);
      await src.close();
    }
  });

  it('float64 needs convert f64-to-f32, then rounds as numpy astype(float32) does', async () => {
    const doubles = Float64Array.from({ length: ROWS * DIMS }, (_, i) => Math.sin(i) * 1e3 + i / 3 + 1e-9);
    for (const list of ['FixedSizeList', 'List'] as const) {
      const path = file([emb(list, rowsOf(doubles, DIMS), 'f64')]);
      await expectFormatError(LocalFileSource.open(path), /column "emb" holds float64 values.*dataset\.convert 'f64-to-f32'/);
      const src = await LocalFileSource.open(path, { convert: 'f64-to-f32' });
      expect([src.dtype, src.convert]).toEqual(['f32', 'f64-to-f32']);
      expect(src.describe()).toContain('<f8 read as <f4');
      expect((await readRows(src, 0, ROWS)).equals(f32Bytes(Float32Array.from(doubles), 0, ROWS)), list).toBe(true);
      await src.close();
    }
  });

  it('float16 is delivered as float16 rows', async () => {
    const expected = encodeF16(Float32Array.from(values, (v) => v / 100));
    const halves = new Uint16Array(expected.buffer, expected.byteOffset, expected.length / 2);
    // values a float16 holds exactly, so any correct writer stores these bits
    const exact = Array.from(halves, (h) => {
      const e = (h >> 10) & 0x1f;
      const m = h & 0x3ff;
      return (h & 0x8000 ? -1 : 1) * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
    });
    for (const list of ['FixedSizeList', 'List'] as const) {
      const src = await LocalFileSource.open(file([emb(list, rowsOf(exact, DIMS), 'f16')], { format: 'stream' }));
      expect([src.dtype, src.rowBytes]).toEqual(['f16', DIMS * 2]);
      expect((await readRows(src, 0, ROWS)).equals(expected), list).toBe(true);
      await src.close();
    }
  });

  it('dims given must match the schema (FixedSizeList) or the first row (List)', async () => {
    await expectFormatError(LocalFileSource.open(file([emb('FixedSizeList')]), { dims: 8 }), /column "emb" has 7 dims, not the 8 given/);
    await expectFormatError(LocalFileSource.open(file([emb('List')]), { dims: 8 }), /column "emb" has 7 dims, not the 8 given/);
  });

  it('a List row of another length, a null row and a null value fail naming the row when their record batch is read', async () => {
    const lists = rowsOf(values, DIMS);
    lists[123] = lists[123].slice(0, 5);
    const ragged = await LocalFileSource.open(file([emb('List', lists)]));
    expect((await readRows(ragged, 0, 80)).equals(f32Bytes(values, 0, 80))).toBe(true);
    await expectFormatError(readRows(ragged, 120, 2), /column "emb" row 123 has 5 values, not the 7 of row 0/);
    await ragged.close();

    for (const list of ['FixedSizeList', 'List'] as const) {
      const nullRow = rowsOf(values, DIMS) as (number[] | null)[];
      nullRow[200] = null;
      const a = await LocalFileSource.open(file([emb(list, nullRow)]));
      expect((await readRows(a, 0, 160)).equals(f32Bytes(values, 0, 160))).toBe(true);
      await expectFormatError(readRows(a, 0, ROWS), /column "emb" row 200 is null/);
      await a.close();

      const nullValue = rowsOf(values, DIMS) as (number | null)[][];
      nullValue[77][3] = null;
      const b = await LocalFileSource.open(file([emb(list, nullValue)]));
      await expectFormatError(readRows(b, 0, ROWS), /column "emb" row 77 has a null at position 3/);
      await b.close();
    }
    const firstNull = rowsOf(values, DIMS) as (number[] | null)[];
    firstNull[0] = null;
    await expectFormatError(LocalFileSource.open(file([emb('List', firstNull)])), /column "emb" row 0 is null/);
  });

  it('non-float and nested columns, an unknown compression, no rows: named at open', async () => {
    const ints = file([{ name: 'ids', data: [[1, 2]], list: 'List', element: 'i32' }]);
    await expectFormatError(LocalFileSource.open(ints), /column "ids" is a List of Int32, not of float32, float16 or float64/);
    const strings = file([{ name: 'tags', data: Array.from({ length: 3 }, () => 'a'), scalar: 'utf8' }]);
    await expectFormatError(LocalFileSource.open(strings), /column "tags" is Utf8, not a list of floats/);
    const unknown = file([emb('FixedSizeList')], { compression: { id: 5, encode: (b) => b.subarray(1) } });
    await expectFormatError(LocalFileSource.open(unknown), /Arrow IPC file record batch 0 is compressed with an unknown codec 5 \(Arrow defines LZ4_FRAME and ZSTD/);
    const empty = file([emb('FixedSizeList', [])]);
    await expectFormatError(LocalFileSource.open(empty), /column "emb" has no rows/);
  });

  it('an empty, truncated or damaged file, another format, Feather v1: named at open', async () => {
    const path = (name: string, bytes: Uint8Array) => {
      const p = join(dir, name);
      writeFileSync(p, bytes);
      return p;
    };
    await expectFormatError(LocalFileSource.open(path('empty.arrow', Buffer.alloc(0))), /Arrow IPC file is empty \(0 bytes\)/);
    const good = encodeArrow([emb('FixedSizeList')], { format: 'file', batchRows: BATCH });
    await expectFormatError(LocalFileSource.open(path('cut.arrow', good.subarray(0, good.length - 100))), /does not end with "ARROW1" \(truncated\?/);
    const stream = encodeArrow([emb('FixedSizeList')], { format: 'stream', batchRows: BATCH });
    await expectFormatError(LocalFileSource.open(path('cut.arrows', stream.subarray(0, 3000))), /Arrow IPC stream ended early: the message at byte \d+ needs \d+ bytes, the file has \d+ left \(truncated\?\)/);
    // the footer's length overwritten: it no longer fits
    const badFooter = Buffer.from(good);
    badFooter.writeInt32LE(1 << 30, badFooter.length - 10);
    await expectFormatError(LocalFileSource.open(path('footer.arrow', badFooter)), /footer length \d+ does not fit/);
    await expectFormatError(LocalFileSource.open(path('npy.arrow', Buffer.concat([Buffer.from('\x93NUMPY\x01\x00'), Buffer.alloc(120, 32)]))), /not an Arrow IPC file or stream/);
    await expectFormatError(LocalFileSource.open(path('v1.feather', Buffer.concat([Buffer.from('FEA1'), Buffer.alloc(60)]))), /Feather v1 file.*version=2/);
    await expectFormatError(LocalFileSource.open(path('stream-as-file.arrow', Buffer.concat([Buffer.from('ARROW1\0\0'), stream]))), /does not end with "ARROW1"/);
  });

  describe('files written by pyarrow', () => {
    const PYARROW = join(import.meta.dirname, '..', 'fixtures', 'pyarrow');
    const x = Float32Array.from({ length: 10 * 4 }, (_, k) => (Math.floor(k / 4) * 7 + (k % 4)) / 8 - 3);
    const bytes = (v: ArrayBufferView) => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

    it('Feather v2 with an id and a dictionary column, FixedSizeList<float>, batches of 3; a List<float> stream; a LargeList<halffloat> file', async () => {
      const cases: [string, string | undefined, Buffer][] = [
        ['table.feather', 'emb', bytes(x)],
        ['list.arrows', undefined, bytes(x)],
        ['large-f16.arrow', undefined, encodeF16(x)],
      ];
      for (const [name, column, want] of cases) {
        const src = await LocalFileSource.open(join(PYARROW, name), { column });
        expect([src.rows, src.dims], name).toEqual([10, 4]);
        const got = await readRows(src, 0, 10);
        expect(got.equals(want), name).toBe(true);
        if (src.dtype === 'f16') expect(f16BitsToF32(got.readUInt16LE(2))).toBe(x[1]);
        await src.close();
      }
    });

    it('LZ4_FRAME and ZSTD (write_feather\'s default is LZ4), file and stream, a compressed dictionary beside: the same rows', async () => {
      const cases: [string, string | undefined][] = [['lz4.feather', 'emb'], ['zstd.feather', 'emb'], ['list-lz4.arrows', undefined], ['list-zstd.arrows', undefined]];
      for (const [name, column] of cases) {
        const src = await LocalFileSource.open(join(PYARROW, name), { column });
        expect([src.rows, src.dims], name).toEqual([10, 4]);
        expect((await readRows(src, 0, 10)).equals(bytes(x)), name).toBe(true);
        // one batch at a time too, last first
        for (const first of [8, 4, 0]) expect((await readRows(src, first, 2)).equals(bytes(x.subarray(first * 4, (first + 2) * 4))), `${name} ${first}`).toBe(true);
        await src.close();
      }
      // the integration test's clusters, computed here as make.py does
      const clusters = Float32Array.from({ length: 3000 * 6 }, (_, k) => {
        const [i, j] = [Math.floor(k / 6), k % 6];
        return ((i * 7) % 5) * 8 + (((i * 131 + j * 71) % 64) / 32 - 1) * (1 + (j % 2));
      });
      for (const [name, column] of [['clusters-lz4.feather', 'emb'], ['clusters-zstd.arrows', undefined]] as const) {
        const src = await LocalFileSource.open(join(PYARROW, name), { column });
        expect([src.rows, src.dims], name).toEqual([3000, 6]);
        expect((await readRows(src, 0, 3000)).equals(bytes(clusters)), name).toBe(true);
        await src.close();
      }
    });

    /** `name`'s bytes, with `change` applied at the `nth` compressed buffer (its codec's magic; the int64 length before it) */
    function damaged(name: string, magic: number, nth: number, change: (b: Buffer, at: number) => void): string {
      const b = readFileSync(join(PYARROW, name));
      let at = -1;
      for (let i = 0; i <= nth; i++) at = b.indexOf(Buffer.from(new Uint32Array([magic]).buffer), at + 1);
      change(b, at);
      const path = join(dir, `damaged-${n++}-${name}`);
      writeFileSync(path, b);
      return path;
    }
    const LZ4_MAGIC = 0x184d2204;
    const ZSTD_MAGIC = 0xfd2fb528;

    it('a damaged compressed buffer, or one of another length than its prefix, fails naming its record batch; the others still read', async () => {
      // the stream's 4th compressed buffer: record batch 1's values (rows 4..7)
      const cases: [string, RegExp][] = [
        // a block's size past the buffer: refused before lz4js decodes it
        [damaged('list-lz4.arrows', LZ4_MAGIC, 3, (b, at) => b.writeUInt32LE(0x7ff00000, at + 7)),
          /Arrow IPC stream record batch 1 \(rows 4\.\.7\) cannot be decoded: a buffer compressed with LZ4_FRAME \(\d+ bytes\) is damaged: a block of \d+ bytes at byte 7/],
        [damaged('list-lz4.arrows', LZ4_MAGIC, 3, (b, at) => b.writeUInt32LE(0x12345678, at)),
          /record batch 1 \(rows 4\.\.7\) cannot be decoded: a buffer compressed with LZ4_FRAME \(\d+ bytes\) is damaged: no LZ4 frame starts at byte 0/],
        [damaged('list-lz4.arrows', LZ4_MAGIC, 3, (b, at) => b.writeBigInt64LE(b.readBigInt64LE(at - 8) + 4n, at - 8)),
          /record batch 1 \(rows 4\.\.7\) cannot be decoded: a buffer compressed with LZ4_FRAME decodes to 64 bytes, not the 68 its length prefix gives/],
        [damaged('list-lz4.arrows', LZ4_MAGIC, 3, (b, at) => b.writeBigInt64LE(b.readBigInt64LE(at - 8) - 4n, at - 8)),
          /record batch 1 \(rows 4\.\.7\) cannot be decoded: a buffer compressed with LZ4_FRAME decodes to more than the 60 bytes its length prefix gives/],
        // the frame header's reserved bit set
        [damaged('list-zstd.arrows', ZSTD_MAGIC, 3, (b, at) => b.writeUInt8(b[at + 4] | 0x08, at + 4)),
          /record batch 1 \(rows 4\.\.7\) cannot be decoded: a buffer compressed with ZSTD \(\d+ bytes\) does not decode \(invalid zstd data\)/],
        [damaged('list-zstd.arrows', ZSTD_MAGIC, 3, (b, at) => b.writeBigInt64LE(b.readBigInt64LE(at - 8) + 4n, at - 8)),
          /record batch 1 \(rows 4\.\.7\) cannot be decoded: a buffer compressed with ZSTD decodes to 64 bytes, not the 68 its length prefix gives/],
        [damaged('list-zstd.arrows', ZSTD_MAGIC, 3, (b, at) => b.writeBigInt64LE(-7n, at - 8)),
          /record batch 1 \(rows 4\.\.7\) cannot be decoded: a buffer compressed with ZSTD gives -7 as its uncompressed length/],
      ];
      for (const [path, message] of cases) {
        const src = await LocalFileSource.open(path);
        expect((await readRows(src, 0, 4)).equals(bytes(x.subarray(0, 16))), path).toBe(true);
        expect((await readRows(src, 8, 2)).equals(bytes(x.subarray(32, 40))), path).toBe(true);
        await expectFormatError(readRows(src, 3, 3), message);
        await src.close();
      }
    });
  });
});
