/**
 * Read a scattered set of rows (an init sample) with few, large reads: sorted indices are grouped so that rows close
 * to each other come from one read of the span between them (the gap is cheaper to read than to seek over on S3 or
 * disk), and a few reads are kept in flight.
 */
import type { RowSource } from '../dataset/row-source.js';

export interface GatherOptions {
  /** read the gap between two wanted rows when it is at most this many bytes (default 64 KiB) */
  gapBytes?: number;
  /** one read spans at most this many bytes (default 4 MiB, at least one row) */
  maxSpanBytes?: number;
  /** reads in flight (default 4) */
  concurrency?: number;
}

/** Copy rows `sortedRows` (ascending, distinct) into target, packed in that order. */
export async function gatherRows(source: RowSource, sortedRows: ArrayLike<number>, target: Buffer, options: GatherOptions = {}): Promise<void> {
  const rb = source.rowBytes;
  if (target.length < sortedRows.length * rb) throw new RangeError('gatherRows: target too small');
  const gapRows = Math.floor((options.gapBytes ?? 65536) / rb);
  const maxSpan = Math.max(1, Math.floor((options.maxSpanBytes ?? 4 << 20) / rb));
  // groups: [index of the first wanted row in sortedRows, count of wanted rows]
  const groups: [number, number][] = [];
  for (let i = 0; i < sortedRows.length; ) {
    let j = i + 1;
    while (
      j < sortedRows.length &&
      sortedRows[j] - sortedRows[j - 1] - 1 <= gapRows &&
      sortedRows[j] - sortedRows[i] + 1 <= maxSpan
    ) j++;
    groups.push([i, j - i]);
    i = j;
  }
  let next = 0;
  const worker = async () => {
    let scratch: Buffer | undefined;
    while (next < groups.length) {
      const [i, n] = groups[next++];
      const lo = sortedRows[i];
      const span = sortedRows[i + n - 1] - lo + 1;
      if (span === n) {
        await source.read(lo, n, target.subarray(i * rb, (i + n) * rb));
        continue;
      }
      let from: Buffer;
      if (source.view) {
        // rows already in memory: copy the wanted ones straight out, not the whole span first
        from = await source.view(lo, span);
      } else {
        from = scratch ??= Buffer.allocUnsafe(maxSpan * rb);
        await source.read(lo, span, from);
      }
      for (let m = 0; m < n; m++) {
        const off = (sortedRows[i + m] - lo) * rb;
        from.copy(target, (i + m) * rb, off, off + rb);
      }
    }
  };
  const lanes = Math.max(1, Math.min(options.concurrency ?? 4, groups.length));
  await Promise.all(Array.from({ length: lanes }, worker));
}
