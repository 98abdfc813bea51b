/**
 * Fills the pod's dataset cache file (cache.ts: named after the object and its ETag) from a memory cache's blocks as
 * they land, beside the job rather than in its way.
 *
 * A dataset the memory cache holds downloads once, at its full speed, feeding the engine's resident rows as it lands
 * (memory-cache.ts, resident-preload.ts); through CachedRowSource instead, its reads would return only after their
 * rows are written to the file, and the last one after the fsync, putting the file's writes in the job's way. Here
 * each landed block is written from the memory cache's buffer on libuv's threads (lent to the memory
 * cache, so its buffer outlives the writes); once every row is in, the file is fsynced and renamed to its final name,
 * so a later job on the pod finds it whole. Any failure, or a job that ends before every block landed, leaves no file:
 * the cache is for later jobs, and never fails this one.
 */
import { rename, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { cacheFileName, startCacheFile, type CacheableSource, type CacheOptions } from './cache.js';
import type { MemoryCachedRowSource } from './memory-cache.js';

export interface CacheFillerOptions extends CacheOptions {
  /** why the file was given up (it never fails the job) */
  onError?: (err: unknown) => void;
}

/**
 * Starts filling `dir`'s cache file of `source` from `memory` (which must be reading `source`); resolves once the
 * temporary file is open and the memory cache's blocks are followed (blocks already in are written at once).
 * Resolves to the final path, or undefined when no file will be written (it does not fit the cap, or the directory
 * is unusable).
 */
export async function fillCacheFromMemory(
  memory: MemoryCachedRowSource, source: CacheableSource, dir: string, options: CacheFillerOptions = {},
): Promise<string | undefined> {
  const onError = options.onError ?? (() => {});
  const path = join(dir, cacheFileName(source.uri, source.etag));
  const bytes = source.rows * source.rowBytes;
  let temp: { fh: FileHandle; tempPath: string } | undefined;
  try {
    temp = await startCacheFile(dir, path, bytes, options, onError);
  } catch (err) {
    onError(err);
    return undefined;
  }
  if (!temp) return undefined;
  const { fh, tempPath } = temp;
  const rowBytes = source.rowBytes;
  const started = new Set<number>();  // blocks (by first row) whose write was issued
  let rowsWritten = 0;
  let state: 'filling' | 'done' | 'dropped' = 'filling';

  const drop = async (err?: unknown) => {
    if (state !== 'filling') return;
    state = 'dropped';
    if (err !== undefined) onError(err);
    await fh.close().catch(() => {});
    await rm(tempPath, { force: true }).catch(() => {});
  };
  const finish = async () => {
    await fh.sync();
    await fh.close();
    await rename(tempPath, path);
    state = 'done';
  };
  const writeBlock = async (firstRow: number, count: number) => {
    const data = memory.rowsInPlace(firstRow, count);
    let done = 0;
    while (done < data.length) {
      if (state !== 'filling') return;
      const { bytesWritten } = await fh.write(data, done, data.length - done, firstRow * rowBytes + done);
      done += bytesWritten;
    }
    rowsWritten += count;
    if (rowsWritten === source.rows && state === 'filling') await finish();
  };

  // a job that ends first (cancelled, failed, or its engine needed no more rows) leaves no partial file behind
  memory.onClose(() => drop());
  // (close() clears the listeners: no unsubscribe needed)
  memory.onRowsArrived((firstRow, count, blockDone) => {
    if (!blockDone || state !== 'filling' || started.has(firstRow)) return;
    started.add(firstRow);
    memory.lend(writeBlock(firstRow, count).catch((err: unknown) => drop(err)));
  });
  return path;
}
