/**
 * Rows stored in another form than the one delivered, decoded as they are read: a float64 .npy rounded to float32
 * (dataset.convert 'f64-to-f32'), and the ANN benchmarks' fvecs/bvecs records, each a 4-byte dim count before the
 * values (float32 or uint8). Every stored row has the same size, so ranges stay addressable by row; the decoder
 * checks each record's dim count as it strips it, so a file that mixes dims fails naming the row instead of
 * delivering shifted values.
 */
import { DatasetFormatError } from './errors.js';
import { convertF64ToF32 } from './f64-to-f32.js';

export type RowDecoding = 'f64-to-f32' | 'fvecs' | 'bvecs';

/** What a decoder needs of a layout. */
export interface DecodedRows {
  decoding: RowDecoding;
  dims: number;
  /** a delivered row (float32) */
  rowBytes: number;
  /** a row as stored */
  storedRowBytes: number;
}

/**
 * Decodes `rows` stored rows at the start of `src` (row `firstRow` of the dataset first) into delivered rows at the
 * start of `dst`. Throws DatasetFormatError for an fvecs/bvecs record whose dim count differs from the dataset's.
 */
export function decodeRows(layout: DecodedRows, src: Uint8Array, dst: Uint8Array, firstRow: number, rows: number): void {
  const { decoding, dims, rowBytes, storedRowBytes } = layout;
  if (src.length < rows * storedRowBytes || dst.length < rows * rowBytes) {
    throw new RangeError(`decodeRows: ${rows} rows need ${rows * storedRowBytes} source and ${rows * rowBytes} target bytes`);
  }
  if (decoding === 'f64-to-f32') return convertF64ToF32(src, dst, rows * dims);
  const from = Buffer.from(src.buffer, src.byteOffset, rows * storedRowBytes);
  const to = Buffer.from(dst.buffer, dst.byteOffset, rows * rowBytes);
  for (let r = 0; r < rows; r++) {
    const at = r * storedRowBytes;
    const d = from.readInt32LE(at);
    if (d !== dims) {
      throw new DatasetFormatError(`${decoding} record ${firstRow + r} declares ${d} dims, not the ${dims} of record 0 (all records of a file must have the same dims)`);
    }
    if (decoding === 'fvecs') {
      from.copy(to, r * rowBytes, at + 4, at + 4 + rowBytes);
    } else {
      const out = r * rowBytes;
      for (let j = 0; j < dims; j++) to.writeFloatLE(from[at + 4 + j], out + 4 * j);
    }
  }
}
