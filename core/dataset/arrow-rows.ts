/**
 * The rows of an Arrow IPC embedding column (formats/arrow-ipc.ts), read by record batch: a read fetches each record
 * batch it touches (one positional read or ranged GET of the batch's message) and decodes it (@uwdata/flechette, with
 * formats/arrow-codecs.ts for LZ4_FRAME- or ZSTD-compressed buffers) into delivered rows, float32 or float16 (decoded-batches.ts keeps the last ones). A FixedSizeList of float32 or
 * float16 is delivered without a copy of its values; a List is checked row by row, so a row of another length fails
 * naming the row instead of delivering shifted values; a null row or value fails naming it too.
 */
import type { Batch } from '@uwdata/flechette';
import { useArrowCodecs } from '../formats/arrow-codecs.js';
import { arrowColumnLayout, type ArrowColumnLayout } from '../formats/arrow-ipc.js';
import { DatasetFormatError } from '../formats/errors.js';
import { convertF64ToF32 } from '../formats/f64-to-f32.js';
import type { DatasetConversion, DatasetDType } from '../formats/npy-header.js';
import type { ReadAt } from '../formats/npz.js';
import { DecodedBatches, type DecodedColumn } from './decoded-batches.js';

type AnyBatch = Batch<unknown>;

export class ArrowRows implements DecodedColumn {
  readonly dims: number;
  readonly rowBytes: number;
  private readonly batches: DecodedBatches;

  private constructor(
    private readonly readAt: ReadAt,
    private readonly size: number,
    readonly layout: ArrowColumnLayout,
    dims: number,
  ) {
    this.dims = dims;
    this.rowBytes = dims * (layout.dtype === 'f32' ? 4 : 2);
    this.batches = new DecodedBatches(layout.batchStarts, this.rowBytes, (b) => this.decodeBatch(b).then((batch) => this.toRows(batch, b)));
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

  /**
   * Indexes the file (arrow-ipc.ts) and finds the dims: a FixedSizeList's from the schema, a List's from its first
   * row (the first record batch is decoded and kept). `dims`, when given, must match.
   */
  static async open(readAt: ReadAt, size: number, opts: { column?: string; convert?: DatasetConversion; dims?: number } = {}): Promise<ArrowRows> {
    const layout = await arrowColumnLayout(readAt, size, opts);
    if (layout.stride !== undefined) return new ArrowRows(readAt, size, layout, layout.stride);
    const probe = new ArrowRows(readAt, size, layout, 0);
    const first = await probe.decodeBatch(0);
    if (first.nullCount > 0 && !first.isValid(0)) throw new DatasetFormatError(`Arrow column "${layout.column}" row 0 is null`);
    const offsets = first.offsets as ArrayLike<number | bigint>;
    const dims = Number(offsets[1]) - Number(offsets[0]);
    if (dims === 0) throw new DatasetFormatError(`Arrow column "${layout.column}" row 0 is an empty list (no dims)`);
    if (opts.dims !== undefined && opts.dims !== dims) {
      throw new DatasetFormatError(`Arrow column "${layout.column}" has ${dims} dims, not the ${opts.dims} given`);
    }
    const rows = new ArrowRows(readAt, size, layout, dims);
    rows.batches.keep(0, rows.toRows(first, 0));
    return rows;
  }

  /** Fills target with rows [firstRow, firstRow+count) (range checked by the caller). */
  read(firstRow: number, count: number, target: Buffer): Promise<void> {
    return this.batches.read(firstRow, count, target);
  }

  /** Record batch b's embedding column, decoded (views over the batch's bytes). */
  private async decodeBatch(b: number): Promise<AnyBatch> {
    const { batches, batchStarts, schema, dictionaries, columnIndex, what, codecs } = this.layout;
    const { offset, length } = batches[b];
    const label = `${what} record batch ${b} (rows ${batchStarts[b]}..${batchStarts[b + 1] - 1})`;
    if (offset + length > this.size) throw new DatasetFormatError(`${label} ends past the file: bytes [${offset}, ${offset + length}) of ${this.size}`);
    // a failed read (S3, the file) is passed on as it is; only what is wrong with the bytes is a format error
    let bytes = await this.readAt(offset, length);
    if (bytes.length < length) throw new DatasetFormatError(`${label} ended early: bytes [${offset}, ${offset + length}) of ${this.size} (was the file truncated?)`);
    // typed views of the values need the body 8-byte aligned, as it is in the file
    if (bytes.byteOffset % 8 !== 0) bytes = new Uint8Array(bytes);
    const { tableFromIPC } = await import('@uwdata/flechette');
    if (codecs.length > 0) await useArrowCodecs(codecs);
    let column: { data: readonly AnyBatch[] } | null;
    try {
      const messages = [schema, ...dictionaries.filter((d) => d.offset < offset).map((d) => d.bytes), bytes.subarray(0, length)];
      column = tableFromIPC(messages).getChildAt(columnIndex) as { data: readonly AnyBatch[] } | null;
    } catch (err) {
      throw new DatasetFormatError(`${label} cannot be decoded: ${(err as Error).message}`);
    }
    const batch = column?.data[0];
    const rows = batchStarts[b + 1] - batchStarts[b];
    if (!batch || batch.length !== rows) {
      throw new DatasetFormatError(`${label} decoded ${batch?.length ?? 0} rows, not the ${rows} its metadata gives (a damaged file?)`);
    }
    return batch;
  }

  /** One record batch's column as delivered rows; `b` the batch, for messages. */
  private toRows(batch: AnyBatch, b: number): Buffer {
    const { dims, rowBytes } = this;
    const { column, stored, list } = this.layout;
    const firstRow = this.layout.batchStarts[b];
    const rows = batch.length;
    if (batch.nullCount > 0) {
      for (let r = 0; r < rows; r++) if (!batch.isValid(r)) throw new DatasetFormatError(`Arrow column "${column}" row ${firstRow + r} is null`);
    }
    // the values of the batch's rows, in order: [start, start + rows × dims) of the child's values
    let start = 0;
    const offsetOf = (r: number) => r * dims;
    let valueOffset = offsetOf;
    if (list !== 'FixedSizeList') {
      const offsets = batch.offsets as ArrayLike<number | bigint>;
      start = Number(offsets[0]);
      for (let r = 0; r < rows; r++) {
        const length = Number(offsets[r + 1]) - Number(offsets[r]);
        if (length !== dims) {
          throw new DatasetFormatError(
            `Arrow column "${column}" row ${firstRow + r} has ${length} values, not the ${dims} of row 0 (every embedding must have the same dims)`,
          );
        }
      }
      valueOffset = (r) => Number(offsets[r]) - start;
    }
    const child = batch.children[0];
    if (child.nullCount > 0) {
      for (let r = 0; r < rows; r++) {
        for (let j = 0; j < dims; j++) {
          if (!child.isValid(start + valueOffset(r) + j)) throw new DatasetFormatError(`Arrow column "${column}" row ${firstRow + r} has a null at position ${j}`);
        }
      }
    }
    const values = (child.values as Float32Array | Float64Array | Uint16Array).subarray(start, start + rows * dims);
    if (values.length !== rows * dims) {
      throw new DatasetFormatError(`Arrow column "${column}" record batch ${b} holds ${values.length} values, not the ${rows * dims} of its ${rows} rows (a damaged file?)`);
    }
    const bytes = Buffer.from(values.buffer, values.byteOffset, values.byteLength);
    if (stored !== 'f64') return bytes;
    const out = Buffer.allocUnsafeSlow(rows * rowBytes);
    convertF64ToF32(bytes, out, rows * dims);
    return out;
  }
}
