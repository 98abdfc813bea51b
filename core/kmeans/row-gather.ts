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
      copyRows(from, target, sortedRows, i, n, lo, rb);
    }
  };
  const lanes = Math.max(1, Math.min(options.concurrency ?? 4, groups.length));
  await Promise.all(Array.from({ length: lanes }, worker));
}

/**
 * Rows sortedRows[i..i+n) out of `from` (which starts at row lo) into target, packed from index i. Word by word when
 * rows and both buffers are 4-byte aligned: a Buffer.copy per row costs ~0.3 µs of call overhead and a throwaway
 * view, which for a 65,536-row sample was about as much as the copying itself (integer words: the bits are moved
 * as they are, whatever they hold).
 */
function copyRows(from: Buffer, target: Buffer, sortedRows: ArrayLike<number>, i: number, n: number, lo: number, rb: number): void {
  if (rb % 4 !== 0 || from.byteOffset % 4 !== 0 || target.byteOffset % 4 !== 0) {
    for (let m = 0; m < n; m++) {
      const off = (sortedRows[i + m] - lo) * rb;
      from.copy(target, (i + m) * rb, off, off + rb);
    }
    return;
  }
  const src = new Uint32Array(from.buffer, from.byteOffset, from.length >>> 2);
  const dst = new Uint32Array(target.buffer, target.byteOffset, target.length >>> 2);
  const w = rb >>> 2;
  for (let m = 0; m < n; m++) {
    const so = (sortedRows[i + m] - lo) * w;
    const d = (i + m) * w;
    for (let j = 0; j < w; j++) dst[d + j] = src[so + j];
  }
}
