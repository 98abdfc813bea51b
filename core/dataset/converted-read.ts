/**
 * A read of rows that are stored in another dtype than the one delivered (a float64 dataset read with the spec's
 * dataset.convert 'f64-to-f32'): the stored bytes land in a scratch buffer, then are converted into the caller's
 * target. Progress (ReadHint.onProgress) is passed on in delivered bytes, whole rows converted as they arrive, so a
 * memory cache can hand out the first rows of a large read early, as it does for unconverted reads.
 */
import { convertF64ToF32 } from '../formats/f64-to-f32.js';
import type { ReadHint } from './row-source.js';

export async function readConverted(
  count: number,
  dims: number,
  target: Buffer,
  hint: ReadHint | undefined,
  readStored: (scratch: Buffer, hint: ReadHint | undefined) => Promise<void>,
): Promise<void> {
  const storedRowBytes = dims * 8;
  const rowBytes = dims * 4;
  // its own ArrayBuffer, offset 0: aligned for a Float64Array view
  const scratch = Buffer.allocUnsafeSlow(count * storedRowBytes);
  let converted = 0;
  const convertTo = (rows: number) => {
    if (rows <= converted) return;
    convertF64ToF32(
      scratch.subarray(converted * storedRowBytes, rows * storedRowBytes),
      target.subarray(converted * rowBytes, rows * rowBytes),
      (rows - converted) * dims,
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
