/**
 * The rows of a Parquet embedding column (formats/parquet.ts), read by row group: a Parquet page cannot be addressed
 * by row, so a read decodes every row group it touches whole (hyparquet) into delivered rows, float32 or float16
 * (decoded-batches.ts keeps the last ones). The first row's length gives the dims; every other row is checked
 * as its group is decoded, so a ragged or null row fails naming the row instead of delivering shifted values.
 */
import { DatasetFormatError } from '../formats/errors.js';
import { f32ToF16Bits } from '../formats/half.js';
import { checkColumnPages, MAX_PROBE_VALUES_PER_ROW } from '../formats/parquet-pages.js';
import { checkedSnappy } from '../formats/snappy-pages.js';
import { parquetColumnLayout, type ParquetColumnLayout, type ParquetFile } from '../formats/parquet.js';
import type { DatasetConversion, DatasetDType } from '../formats/npy-header.js';
import { DecodedBatches, type DecodedColumn } from './decoded-batches.js';

/** a stored value's bytes */
const VALUE_BYTES: Record<ParquetColumnLayout['stored'], number> = { FLOAT: 4, DOUBLE: 8, FLOAT16: 2 };

export class ParquetRows implements DecodedColumn {
  readonly dims: number;
  readonly rowBytes: number;
  private readonly groups: DecodedBatches;

  private constructor(
    file: ParquetFile,
    readonly layout: ParquetColumnLayout,
    dims: number,
  ) {
    this.dims = dims;
    this.rowBytes = dims * (layout.dtype === 'f32' ? 4 : 2);
    this.groups = new DecodedBatches(layout.groupStarts, this.rowBytes, (g) =>
      decodeGroupValues(file, layout, g, dims).then((values) => this.toRows(values, layout.groupStarts[g])));
  }

  get rows(): number {
    return this.layout.rows;
  }

  get column(): string {
    return this.layout.column;
  }

  get dtype(): DatasetDType {
    return this.layout.dtype;
  }

  get convert(): DatasetConversion | undefined {
    return this.layout.convert;
  }

  /** Reads the footer, checks the column and decodes the first row group for the dims. `dims`, when given, must match. */
  static async open(file: ParquetFile, opts: { column?: string; convert?: DatasetConversion; dims?: number } = {}): Promise<ParquetRows> {
    const layout = await parquetColumnLayout(file, opts);
    const first = await decodeGroupValues(file, layout, 0, MAX_PROBE_VALUES_PER_ROW);
    const row0 = first[0];
    if (row0 === null || row0 === undefined) throw new DatasetFormatError(`Parquet column "${layout.column}" row 0 is null`);
    if (!Array.isArray(row0) && !ArrayBuffer.isView(row0)) throw new DatasetFormatError(`Parquet column "${layout.column}" row 0 is not a list`);
    const dims = (row0 as ArrayLike<unknown>).length;
    if (dims === 0) throw new DatasetFormatError(`Parquet column "${layout.column}" row 0 is an empty list (no dims)`);
    if (opts.dims !== undefined && opts.dims !== dims) {
      throw new DatasetFormatError(`Parquet column "${layout.column}" has ${dims} dims, not the ${opts.dims} given`);
    }
    const rows = new ParquetRows(file, layout, dims);
    rows.groups.keep(0, rows.toRows(first, 0));
    return rows;
  }

  /** Fills target with rows [firstRow, firstRow+count) (range checked by the caller). */
  read(firstRow: number, count: number, target: Buffer): Promise<void> {
    return this.groups.read(firstRow, count, target);
  }

  /** one group's decoded lists as delivered rows; `firstRow` is the group's first row in the dataset, for messages */
  private toRows(values: unknown[], firstRow: number): Buffer {
    const { dims, rowBytes } = this;
    const { column, dtype } = this.layout;
    const out = Buffer.allocUnsafeSlow(values.length * rowBytes);
    const f32 = dtype === 'f32' ? new Float32Array(out.buffer, out.byteOffset, values.length * dims) : undefined;
    for (let r = 0; r < values.length; r++) {
      const row = values[r] as ArrayLike<number | null> | null | undefined;
      if (row === null || row === undefined) throw new DatasetFormatError(`Parquet column "${column}" row ${firstRow + r} is null`);
      if (row.length !== dims) {
        throw new DatasetFormatError(
          `Parquet column "${column}" row ${firstRow + r} has ${row.length} values, not the ${dims} of row 0 (every embedding must have the same dims)`,
        );
      }
      for (let j = 0; j < dims; j++) {
        const v = row[j];
        if (typeof v !== 'number') throw new DatasetFormatError(`Parquet column "${column}" row ${firstRow + r} has a null at position ${j}`);
        if (f32) f32[r * dims + j] = v;
        else out.writeUInt16LE(f32ToF16Bits(v), (r * dims + j) * 2);
      }
    }
    return out;
  }
}

/** Decodes row group `g` of the column, rows of at most `valuesPerRow` values: one list (or null) per row. */
async function decodeGroupValues(file: ParquetFile, layout: ParquetColumnLayout, g: number, valuesPerRow: number): Promise<unknown[]> {
  const { parquetRead, snappyUncompress } = await import('hyparquet');
  const start = layout.groupStarts[g];
  const rows = layout.groupStarts[g + 1] - start;
  const label = `Parquet column "${layout.column}" row group ${g} (rows ${start}..${start + rows - 1})`;
  // the pages' headers checked first (parquet-pages.ts); the decode then takes the chunk's bytes read for that
  const chunk = await checkColumnPages(file, layout.metadata, layout.column, g, { rows, valuesPerRow, valueBytes: VALUE_BYTES[layout.stored] }, label);
  const values: unknown[] = new Array(rows);
  let filled = 0;
  // a failed read (S3, the file) is passed on as it is; only what hyparquet says of the bytes is a format error
  let readError: unknown;
  const chunkEnd = chunk.start + chunk.bytes.byteLength;
  const reading: ParquetFile = {
    byteLength: file.byteLength,
    slice: (s, e = file.byteLength) => {
      if (s >= chunk.start && e <= chunkEnd) return Promise.resolve(chunk.bytes.slice(s - chunk.start, e - chunk.start));
      return file.slice(s, e).catch((err: unknown) => {
        readError ??= err;
        throw err;
      });
    },
  };
  try {
    await parquetRead({
      file: reading,
      metadata: layout.metadata,
      columns: [layout.column],
      compressors: { SNAPPY: checkedSnappy(snappyUncompress) },
      rowStart: start,
      rowEnd: start + rows,
      onChunk: (chunk) => {
        for (let i = 0; i < chunk.columnData.length; i++) {
          const at = chunk.rowStart + i - start;
          if (at >= 0 && at < rows) {
            values[at] = chunk.columnData[i];
            filled++;
          }
        }
      },
    });
  } catch (err) {
    if (readError !== undefined) throw readError;
    if (err instanceof DatasetFormatError) throw err;
    throw new DatasetFormatError(`${label} cannot be decoded: ${(err as Error).message}`);
  }
  if (filled !== rows) {
    throw new DatasetFormatError(`Parquet column "${layout.column}" row group ${g} decoded ${filled} rows, not the ${rows} its footer gives (a damaged file?)`);
  }
  return values;
}
