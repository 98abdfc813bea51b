/**
 * A read of rows that are stored in another form than the one delivered (a float64 dataset read with the spec's
 * dataset.convert 'f64-to-f32', fvecs/bvecs records: formats/row-decoding.ts): the stored bytes land in a scratch
 * buffer, then are decoded into the caller's target. Progress (ReadHint.onProgress) is passed on in delivered bytes,
 * whole rows decoded as they arrive, so a memory cache can hand out the first rows of a large read early, as it does
 * for plain reads.
 */
import { decodeRows, type DecodedRows } from '../formats/row-decoding.js';
import type { ReadHint } from './row-source.js';

export async function readConverted(
  layout: DecodedRows,
  firstRow: number,
  count: number,
  target: Buffer,
  hint: ReadHint | undefined,
  readStored: (scratch: Buffer, hint: ReadHint | undefined) => Promise<void>,
): Promise<void> {
  const { storedRowBytes, rowBytes } = layout;
  // its own ArrayBuffer, offset 0: aligned for a Float64Array view
  const scratch = Buffer.allocUnsafeSlow(count * storedRowBytes);
  let converted = 0;
  const convertTo = (rows: number) => {
    if (rows <= converted) return;
    decodeRows(
      layout,
      scratch.subarray(converted * storedRowBytes, rows * storedRowBytes),
      target.subarray(converted * rowBytes, rows * rowBytes),
      firstRow + converted,
      rows - converted,
    );
    converted = rows;
  };
  const onProgress = hint?.onProgress;
  await readStored(scratch, {
    ...hint,
    // a retry starts again from 0 with the same bytes: rows already converted stay right, and progress only grows
    ...(onProgress ? { onProgress: (bytes: number) => (convertTo(Math.floor(bytes / storedRowBytes)), onProgress(converted * rowBytes)) } : {}),
  });
  convertTo(count);
}
