/**
 * Raw little-endian row-major files with no header (`f32`, `f16`): the caller gives dims, the size gives the rows.
 */
import { DatasetFormatError } from './errors.js';
import type { DatasetLayout } from './npy-header.js';

export type RawFormat = 'f32' | 'f16';

export function rawLayout(format: RawFormat, fileSize: number, dims: number | undefined): DatasetLayout {
  if (dims === undefined) throw new DatasetFormatError(`format '${format}' has no header: give the number of dims`);
  if (!Number.isSafeInteger(dims) || dims < 1) throw new DatasetFormatError(`dims must be a positive integer, got ${dims}`);
  const itemSize = format === 'f32' ? 4 : 2;
  const rowBytes = dims * itemSize;
  // a size from a HEAD answer or a stat: refuse what no real file has rather than derive negative or inexact rows
  if (!Number.isSafeInteger(fileSize) || fileSize < 0) throw new DatasetFormatError(`raw ${format} file size ${fileSize} is not a byte count`);
  if (fileSize === 0) throw new DatasetFormatError(`raw ${format} file is empty`);
  if (fileSize % rowBytes !== 0) {
    throw new DatasetFormatError(
      `raw ${format} file of ${fileSize} bytes is not a whole number of ${dims}-dim rows (${rowBytes} bytes each; ${fileSize % rowBytes} bytes left over)`,
    );
  }
  return { dtype: format, rows: fileSize / rowBytes, dims, dataOffset: 0, fortranOrder: false, itemSize, rowBytes, storedRowBytes: rowBytes };
}
