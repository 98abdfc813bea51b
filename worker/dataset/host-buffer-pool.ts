/**
 * One spare host buffer kept between jobs for the memory cache (memory-cache.ts), so that a worker running jobs back
 * to back does not map and fault in a fresh dataset-sized buffer for each: on the build machine the first touch of
 * 128 MB costs ~50 ms of CPU (the kernel zeroes every page), paid inside the download that k-means++ waits for, on
 * cores the download itself needs. The spare goes after `idleMs` without a job, so an idle pod gives the memory back.
 *
 * Only one buffer is kept (the largest given back): concurrent jobs beyond the first allocate their own. A job may get
 * a buffer larger than it needs, as a subarray; callers must not assume zeroed memory (allocUnsafe semantics anyway).
 */
const DEFAULT_IDLE_MS = 60_000;
/** smaller buffers are cheap to fault in, and allocUnsafe may carve them out of Node's shared pool: never kept */
const MIN_POOLED_BYTES = 1 << 20;

let spare: ArrayBuffer | undefined;
let timer: NodeJS.Timeout | undefined;

/** A buffer of exactly `bytes` (a view of the spare when it is large enough). */
export function takeHostBuffer(bytes: number): Buffer {
  if (spare && bytes >= MIN_POOLED_BYTES && spare.byteLength >= bytes) {
    const ab = spare;
    spare = undefined;
    clearTimeout(timer);
    timer = undefined;
    return Buffer.from(ab, 0, bytes);
  }
  return Buffer.allocUnsafe(bytes);
}

/** Hand back a buffer from takeHostBuffer when its job is done with it (nothing may write into it afterwards). */
export function giveBackHostBuffer(buf: Buffer, idleMs = DEFAULT_IDLE_MS): void {
  const ab = buf.buffer;
  // only a buffer that owns its whole allocation (not a slice of Node's pool or of something else)
  if (!(ab instanceof ArrayBuffer) || buf.byteOffset !== 0 || ab.byteLength < MIN_POOLED_BYTES || buf.length < MIN_POOLED_BYTES) return;
  if (spare && spare.byteLength >= ab.byteLength) return;
  spare = ab;
  clearTimeout(timer);
  timer = setTimeout(() => {
    spare = undefined;
    timer = undefined;
  }, idleMs);
  timer.unref();
}

/** For tests: drop the spare now. */
export function dropSpareHostBuffer(): void {
  spare = undefined;
  clearTimeout(timer);
  timer = undefined;
}
