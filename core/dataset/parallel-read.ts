/**
 * A file range read as several positional reads in flight at once: one pread of a whole chunk runs on one of libuv's
 * threads at one core's copy speed, while the page cache or an NVMe drive serves several at a time. Used for the rows
 * a pass reads from a local file on every pass (kmfleet fit's input, the pod's cache file).
 */
import type { FileHandle } from 'node:fs/promises';

/** bytes per positional read: large enough for a drive's sequential speed, small enough to spread over threads */
const PART_BYTES = 8 << 20;
/** reads in flight per call: libuv's default thread pool is 4 threads, shared with the rest of the process */
const IN_FLIGHT = 4;

/**
 * Fill target[0, bytes) from the file at `position`. Rejects with `onShort()`'s error when the file ends first.
 */
export async function readFileRange(fh: FileHandle, target: Buffer, position: number, bytes: number, onShort: () => Error): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < bytes) {
      const start = next;
      const end = Math.min(bytes, start + PART_BYTES);
      next = end;
      let done = start;
      while (done < end) {
        const { bytesRead } = await fh.read(target, done, end - done, position + done);
        if (bytesRead === 0) throw onShort();
        done += bytesRead;
      }
    }
  };
  const lanes = Math.min(IN_FLIGHT, Math.ceil(bytes / PART_BYTES));
  await Promise.all(Array.from({ length: Math.max(1, lanes) }, lane));
}
