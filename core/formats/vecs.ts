/**
 * fvecs and bvecs, the ANN benchmarks' formats (http://corpus-texmex.irisa.fr/): a file of records, each a
 * little-endian int32 dim count d followed by d float32 (fvecs) or d uint8 (bvecs) values. Records have a fixed size,
 * so the layout is row-addressable like .npy: the first record's dim count gives the dims, the file size the rows.
 * bvecs values are delivered as float32 (exact: every uint8 is a float32).
 */
import { DatasetFormatError } from './errors.js';
import type { DatasetLayout } from './npy-header.js';

export type VecsFormat = 'fvecs' | 'bvecs';
/** bytes a reader fetches first: the first record's dim count */
export const VECS_HEADER_BYTES = 4;

/**
 * The layout of an fvecs/bvecs file of `fileSize` bytes whose first bytes are `head`. `dims`, when given (the spec's
 * dataset.dims), must match the first record's dim count.
 */
export function vecsLayout(format: VecsFormat, head: Uint8Array, fileSize: number, dims?: number): DatasetLayout {
  if (!Number.isSafeInteger(fileSize) || fileSize < 0) throw new DatasetFormatError(`${format} file size ${fileSize} is not a byte count`);
  if (fileSize === 0) throw new DatasetFormatError(`${format} file is empty`);
  if (fileSize < VECS_HEADER_BYTES || head.length < VECS_HEADER_BYTES) {
    throw new DatasetFormatError(`${format} file of ${fileSize} bytes is too short for a record's 4-byte dim count`);
  }
  const d = Buffer.from(head.buffer, head.byteOffset, VECS_HEADER_BYTES).readInt32LE(0);
  const valueBytes = format === 'fvecs' ? 4 : 1;
  if (d < 1) throw new DatasetFormatError(`${format} record 0 declares ${d} dims; a record needs at least 1 (is this really ${format}?)`);
  const storedRowBytes = VECS_HEADER_BYTES + d * valueBytes;
  if (storedRowBytes > fileSize) {
    throw new DatasetFormatError(
      `${format} record 0 declares ${d} dims (${storedRowBytes}-byte records) but the file has only ${fileSize} bytes (is this really ${format}?)`,
    );
  }
  if (fileSize % storedRowBytes !== 0) {
    throw new DatasetFormatError(
      `${format} file of ${fileSize} bytes is not a whole number of ${d}-dim records (${storedRowBytes} bytes each: ` +
        `${Math.floor(fileSize / storedRowBytes)} records and ${fileSize % storedRowBytes} bytes left over; truncated, or records of different dims?)`,
    );
  }
  if (dims !== undefined && dims !== d) throw new DatasetFormatError(`${format} records have ${d} dims, not the ${dims} given`);
  return {
    dtype: 'f32', rows: fileSize / storedRowBytes, dims: d, dataOffset: 0, fortranOrder: false, itemSize: 4, rowBytes: d * 4,
    storedRowBytes, decoding: format,
  };
}
