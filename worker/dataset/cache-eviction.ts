/**
 * Keeps a dataset cache directory (KMFLEET_CACHE_DIR, cache.ts) under a size cap (KMFLEET_CACHE_MAX_GB): before a
 * job fills a new cache file, the complete files used least recently go, until the new one fits. Without a cap,
 * nothing is evicted (the disk is the operator's to size, and a full disk only switches the cache off for a job).
 *
 * "Used" is the file's mtime: a job that reads a complete file touches it (noatime mounts keep no access times).
 * Several workers may share the directory (a hostPath on a node's NVMe): deleting a file another worker is reading is
 * safe (Linux keeps an unlinked file's data until its last descriptor closes), and a `.partial` file is another job
 * filling its cache right now — it counts against the cap but is never deleted, unless it is older than a day (its
 * writer died without cleaning up). The cap is kept when caches are filled one at a time; two jobs that make room at
 * the same moment each count only the other's partial file as far as it has been written, so together they may
 * exceed the cap by up to their datasets' size until the next job makes room.
 */
import { readdir, rm, stat, utimes } from 'node:fs/promises';
import { join } from 'node:path';

/** A `.partial` file untouched this long belongs to a writer that died. */
export const STALE_PARTIAL_MS = 24 * 3600 * 1000;

export interface CacheRoom {
  /** the new file may be written: the directory's files plus it fit the cap */
  fits: boolean;
  /** complete files deleted to make room (least recently used first), stale partial files included */
  evicted: string[];
  /** bytes of the directory's cache files after evicting */
  usedBytes: number;
  /** of which in other jobs' partial files (being filled now) */
  fillingBytes: number;
}

interface CacheEntry {
  path: string;
  bytes: number;
  mtimeMs: number;
  partial: boolean;
}

async function cacheEntries(dir: string): Promise<CacheEntry[]> {
  const names = await readdir(dir);
  const entries = await Promise.all(
    names
      .filter((n) => n.endsWith('.rows') || n.endsWith('.partial'))
      .map(async (n) => {
        const path = join(dir, n);
        const s = await stat(path).catch(() => undefined);  // gone meanwhile: another worker evicted or renamed it
        return s?.isFile() ? { path, bytes: s.size, mtimeMs: s.mtimeMs, partial: n.endsWith('.partial') } : undefined;
      }),
  );
  return entries.filter((e): e is CacheEntry => e !== undefined);
}

/**
 * Makes room for a file of `needBytes` in `dir` under `maxBytes`. `fits` is false when the file alone is larger than
 * the cap, or when other jobs' partial files leave no room even after every complete file went; then the caller
 * reads without a cache, and nothing was deleted for a file that won't be written.
 */
export async function makeCacheRoom(dir: string, needBytes: number, maxBytes: number, now = Date.now()): Promise<CacheRoom> {
  if (needBytes > maxBytes) return { fits: false, evicted: [], usedBytes: 0, fillingBytes: 0 };
  const entries = await cacheEntries(dir);
  const evicted: string[] = [];
  let used = 0;
  for (const e of entries) used += e.bytes;
  const remove = async (e: CacheEntry) => {
    await rm(e.path, { force: true });
    evicted.push(e.path);
    used -= e.bytes;
  };
  for (const e of entries.filter((x) => x.partial && now - x.mtimeMs > STALE_PARTIAL_MS)) await remove(e);
  const complete = entries.filter((x) => !x.partial).sort((a, b) => a.mtimeMs - b.mtimeMs || a.path.localeCompare(b.path));
  const freeable = complete.reduce((sum, e) => sum + e.bytes, 0);
  const filling = used - freeable;
  if (filling + needBytes > maxBytes) return { fits: false, evicted, usedBytes: used, fillingBytes: filling };
  for (const e of complete) {
    if (used + needBytes <= maxBytes) break;
    await remove(e);
  }
  return { fits: true, evicted, usedBytes: used, fillingBytes: filling };
}

/** Marks a complete cache file as used now (its eviction order); a failure only costs the file its place. */
export async function touchCacheFile(path: string, now = new Date()): Promise<void> {
  await utimes(path, now, now).catch(() => {});
}
