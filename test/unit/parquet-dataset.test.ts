/**
 * Parquet embedding columns through LocalFileSource: the rows delivered are bitwise the rows of the same data as
 * float32 (or float16) arrays, for ranges within and across row groups; bad files fail with a DatasetFormatError
 * naming the problem (at open, or for a ragged or null row, at the read of its row group). Files are written by
 * hyparquet-writer in the layout pyarrow gives list<float> (test/helpers/parquet.ts).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { DatasetFormatError, encodeF16 } from '../../core/formats/index.js';
import { asLists, encodeParquet, type EmbeddingColumn } from '../helpers/parquet.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-parquet-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ROWS = 301;
const DIMS = 7;
const GROUP = 40;
const values = Float32Array.from({ length: ROWS * DIMS }, (_, i) => Math.sin(i) * 1e3 + i / 7);
const ranges = [[0, ROWS], [0, 1], [ROWS - 1, 1], [13, 200], [39, 2], [40, 40], [300, 1]] as const;

let n = 0;
function file(columns: EmbeddingColumn[], rowGroupSize = GROUP): string {
  const path = join(dir, `t${n++}.parquet`);
  writeFileSync(path, encodeParquet(columns, rowGroupSize));
  return path;
}

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

describe('Parquet embedding columns', () => {
  it('list<float>: every range, within and across row groups, in any order, is bitwise the float32 rows', async () => {
    const path = file([{ name: 'emb', data: asLists(values, DIMS), element: 'FLOAT' }]);
    const src = await LocalFileSource.open(path);
    try {
      expect([src.format, src.rows, src.dims, src.dtype, src.column]).toEqual(['parquet', ROWS, DIMS, 'f32', 'emb']);
      expect(src.describe()).toContain('parquet column emb <f4');
      for (const [first, count] of [...ranges, ...[...ranges].reverse()]) {
        expect((await readRows(src, first, count)).equals(f32Bytes(values, first, count))).toBe(true);
      }
      const parts = await Promise.all([0, 50, 100, 150, 200, 250].map((f) => readRows(src, f, f === 250 ? ROWS - f : 50)));
      expect(Buffer.concat(parts).equals(f32Bytes(values, 0, ROWS))).toBe(true);
    } finally {
      await src.close();
    }
  });

  it('picks --column among several; without it, names the columns', async () => {
    const path = file([
      { name: 'id', data: Array.from({ length: ROWS }, (_, i) => i), element: 'INT32', scalar: true },
      { name: 'vec', data: asLists(values, DIMS), element: 'FLOAT' },
    ]);
    await expectFormatError(LocalFileSource.open(path), /has 2 columns: say which one .*dataset\.column.*--column.*: id, vec/);
    await expectFormatError(LocalFileSource.open(path, { column: 'nope' }), /no column "nope" \(it has: id, vec\)/);
    await expectFormatError(LocalFileSource.open(path, { column: 'id' }), /"id" is a scalar column of INT32, not a list of floats/);
    const src = await LocalFileSource.open(path, { column: 'vec' });
    expect((await readRows(src, 0, ROWS)).equals(f32Bytes(values, 0, ROWS))).toBe(true);
    await src.close();
  });

  it('list<double> needs convert f64-to-f32, then rounds as numpy astype(float32) does', async () => {
    const doubles = Float64Array.from({ length: ROWS * DIMS }, (_, i) => Math.sin(i) * 1e3 + i / 3 + 1e-9);
    const path = file([{ name: 'emb', data: asLists(doubles, DIMS), element: 'DOUBLE' }]);
    await expectFormatError(LocalFileSource.open(path), /float64 values.*dataset\.convert 'f64-to-f32'/);
    const src = await LocalFileSource.open(path, { convert: 'f64-to-f32' });
    expect([src.dtype, src.convert]).toEqual(['f32', 'f64-to-f32']);
    expect((await readRows(src, 0, ROWS)).equals(f32Bytes(Float32Array.from(doubles), 0, ROWS))).toBe(true);
    await src.close();
  });

  it('list<halffloat> is delivered as float16 rows', async () => {
    const halves = Array.from(values, (v) => v / 100);
    const expected = encodeF16(Float32Array.from(halves));
    const exact = Array.from(new Uint16Array(expected.buffer, expected.byteOffset, expected.length / 2), (_, i) => halves[i]);
    const path = file([{ name: 'emb', data: asLists(exact, DIMS), element: 'FLOAT16' }]);
    const src = await LocalFileSource.open(path);
    expect([src.dtype, src.rowBytes]).toEqual(['f16', DIMS * 2]);
    expect((await readRows(src, 0, ROWS)).equals(expected)).toBe(true);
    await src.close();
  });

  it('dims given must match the first row', async () => {
    const path = file([{ name: 'emb', data: asLists(values, DIMS), element: 'FLOAT' }]);
    await expectFormatError(LocalFileSource.open(path, { dims: 8 }), /has 7 dims, not the 8 given/);
  });

  it('a ragged row, a null row and a null value fail naming the row when their row group is read', async () => {
    const lists = asLists(values, DIMS);
    lists[123] = lists[123].slice(0, 5);
    const ragged = await LocalFileSource.open(file([{ name: 'emb', data: lists, element: 'FLOAT' }]));
    expect((await readRows(ragged, 0, 80)).equals(f32Bytes(values, 0, 80))).toBe(true);
    await expectFormatError(readRows(ragged, 120, 2), /column "emb" row 123 has 5 values, not the 7 of row 0/);
    await ragged.close();

    const nullRow = asLists(values, DIMS) as (number[] | null)[];
    nullRow[200] = null;
    const a = await LocalFileSource.open(file([{ name: 'emb', data: nullRow, element: 'FLOAT' }]));
    await expectFormatError(readRows(a, 0, ROWS), /row 200 is null/);
    await a.close();

    const nullValue = asLists(values, DIMS) as (number | null)[][];
    nullValue[77][3] = null;
    const b = await LocalFileSource.open(file([{ name: 'emb', data: nullValue, element: 'FLOAT' }]));
    await expectFormatError(readRows(b, 0, ROWS), /row 77 has a null at position 3/);
    await b.close();
  });

  it('non-numeric and nested columns, a truncated file, another format: named at open', async () => {
    const strings = file([{ name: 'tags', data: Array.from({ length: 3 }, () => ['a', 'b']), element: 'BYTE_ARRAY' }]);
    await expectFormatError(LocalFileSource.open(strings), /"tags" is a list of BYTE_ARRAY, not of float, float16 or double/);
    const good = encodeParquet([{ name: 'emb', data: asLists(values, DIMS), element: 'FLOAT' }], GROUP);
    const cut = join(dir, 'cut.parquet');
    writeFileSync(cut, good.subarray(0, good.length - 100));
    await expectFormatError(LocalFileSource.open(cut), /not a Parquet file: it does not end with "PAR1"/);
    const npy = join(dir, 'really-npy.parquet');
    writeFileSync(npy, Buffer.alloc(64, 1));
    await expectFormatError(LocalFileSource.open(npy), /not a Parquet file/);
    const tiny = join(dir, 'tiny.parquet');
    writeFileSync(tiny, Buffer.from('PAR1'));
    await expectFormatError(LocalFileSource.open(tiny), /too short/);
  });
});
