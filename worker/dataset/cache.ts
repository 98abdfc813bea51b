/**
 * An optional local cache of a remote dataset (KMFLEET_CACHE_DIR, the pod's NVMe): the first pass reads rows from the
 * inner source (S3) and also writes them to a local file; later passes read the rows the file already holds.
 * DESIGN.md, Streaming: only rows not resident in the engine are read again, so the cache pays off for datasets larger
 * than the engine's memory budget.
 *
 * The file is named after the object and its ETag, so a new version of the dataset never reads old bytes. It is filled
 * under a private temporary name and renamed once complete: a later job on the same pod and dataset reuses it whole,
 * and two jobs filling it at once never see each other's half-written file. A cache that fails (disk full) is
 * switched off for the rest of the job, never failing it. With a cap (KMFLEET_CACHE_MAX_GB) the least recently used
 * files make room for a new one (cache-eviction.ts); without one nothing is evicted: size the volume, or clean it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { type DatasetDType, checkReadRange, checkRowRange, type FileRows, readFileRange, type RowSource } from '../../core/index.js';
import { makeCacheRoom, touchCacheFile } from './cache-eviction.js';

/** What the cache needs to know about the remote object to name it. */
export interface CacheableSource extends RowSource {
  readonly uri: string;
  readonly etag: string;
}

export interface CacheOptions {
  /** keep the directory's cache files under this many bytes (KMFLEET_CACHE_MAX_GB); unset: no limit */
  maxBytes?: number;
  /** the files evicted to make room */
  onEvict?: (paths: string[]) => void;
}

export interface CacheStats {
  hitRows: number;
  missRows: number;
  /** the cache was given up after an error (message) */
  disabled?: string;
}

export function cacheFileName(uri: string, etag: string): string {
  return createHash('sha256').update(uri).update('\0').update(etag).digest('hex').slice(0, 40) + '.rows';
}

export class CachedRowSource implements RowSource {
  readonly rows: number;
  readonly dims: number;
  readonly dtype: DatasetDType;
  readonly rowBytes: number;
  readonly stats: CacheStats = { hitRows: 0, missRows: 0 };
  /** rows present in the file */
  private filled = new RowIntervals();
  private complete: boolean;
  private writes = new Set<Promise<void>>();

  private constructor(
    private readonly inner: CacheableSource,
    private fh: FileHandle | undefined,
    readonly path: string,
    private readonly tempPath: string | undefined,
    complete: boolean,
    private readonly onError: (err: unknown) => void,
  ) {
    this.rows = inner.rows;
    this.dims = inner.dims;
    this.dtype = inner.dtype;
    this.rowBytes = inner.rowBytes;
    this.complete = complete;
    if (complete) this.filled.add(0, inner.rows);
  }

  /**
   * The complete cache file of `inner` as a source, or undefined when there is none (or the directory is unusable:
   * onError is told). The file is opened before it is looked at: one that another job evicts after that stays
   * readable through the handle, and one evicted before it is a plain miss, not an error.
   */
  static async openComplete(inner: CacheableSource, dir: string, onError: (err: unknown) => void = () => {}): Promise<CachedRowSource | undefined> {
    const path = join(dir, cacheFileName(inner.uri, inner.etag));
    let fh: FileHandle;
    try {
      fh = await open(path, 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') onError(err);
      return undefined;
    }
    try {
      // only a complete file has the final name (filled under a temporary one, then renamed): the size is a check
      if ((await fh.stat()).size !== inner.rows * inner.rowBytes) {
        await fh.close();
        return undefined;
      }
      await touchCacheFile(path);
      return new CachedRowSource(inner, fh, path, undefined, true, onError);
    } catch (err) {
      await fh.close().catch(() => {});
      onError(err);
      return undefined;
    }
  }

  /**
   * Wrap `inner`: its complete cache file when there is one, else a new file filled as the rows are read
   * (startFilling).
   */
  static async open(
    inner: CacheableSource,
    dir: string,
    onError: (err: unknown) => void = () => {},
    options: CacheOptions = {},
  ): Promise<RowSource> {
    return (await CachedRowSource.openComplete(inner, dir, onError)) ?? CachedRowSource.startFilling(inner, dir, onError, options);
  }

  /**
   * `inner` with a new cache file that the reads fill, for a dataset the directory has no complete file of (open
   * checks). When the directory is unusable, or (with `maxBytes`) the dataset cannot fit under the cap, the inner
   * source is returned as is (and onError told why). The new file first makes room under the cap
   * (cache-eviction.ts: least recently used complete files go, `onEvict` is told which).
   */
  static async startFilling(
    inner: CacheableSource,
    dir: string,
    onError: (err: unknown) => void = () => {},
    options: CacheOptions = {},
  ): Promise<RowSource> {
    const path = join(dir, cacheFileName(inner.uri, inner.etag));
    try {
      const temp = await startCacheFile(dir, path, inner.rows * inner.rowBytes, options, onError);
      if (!temp) return inner;
      return new CachedRowSource(inner, temp.fh, path, temp.tempPath, false, onError);
    } catch (err) {
      onError(err);
      return inner;
    }
  }

  describe(): string {
    return `${this.inner.describe()} [cache ${this.path}${this.complete ? ', complete' : ''}]`;
  }

  /** Only from a complete file: no write can then fail and close it under an engine reading it. */
  fileRows(firstRow: number, count: number): FileRows | undefined {
    checkRowRange(this, firstRow, count);
    if (!this.fh || !this.complete) return undefined;
    this.stats.hitRows += count;
    return { fd: this.fh.fd, offset: firstRow * this.rowBytes };
  }

  async read(firstRow: number, count: number, target: Buffer): Promise<void> {
    checkReadRange(this, firstRow, count, target);
    const bytes = count * this.rowBytes;
    if (this.fh && this.filled.covers(firstRow, firstRow + count)) {
      await readFileRange(this.fh, target, firstRow * this.rowBytes, bytes, () => new Error(`cache file ${this.path} ended early`));
      this.stats.hitRows += count;
      return;
    }
    await this.inner.read(firstRow, count, target);
    this.stats.missRows += count;
    if (this.fh && !this.complete) {
      // Written before read() resolves: the caller reuses target as soon as we return.
      const w = this.write(target.subarray(0, bytes), firstRow, count);
      this.writes.add(w);
      await w;
      this.writes.delete(w);
    }
  }

  private async write(data: Buffer, firstRow: number, count: number): Promise<void> {
    const fh = this.fh;
    if (!fh) return;
    try {
      let done = 0;
      while (done < data.length) {
        const { bytesWritten } = await fh.write(data, done, data.length - done, firstRow * this.rowBytes + done);
        done += bytesWritten;
      }
      this.filled.add(firstRow, firstRow + count);
      if (!this.complete && this.filled.covers(0, this.rows)) await this.finish();
    } catch (err) {
      await this.disable(err);
    }
  }

  /** All rows are in the temp file: publish it under its final name for later passes and later jobs. */
  private async finish(): Promise<void> {
    this.complete = true;
    await this.fh!.sync();
    await rename(this.tempPath!, this.path);
  }

  private async disable(err: unknown): Promise<void> {
    this.stats.disabled = err instanceof Error ? err.message : String(err);
    const fh = this.fh;
    this.fh = undefined;
    this.filled = new RowIntervals();
    await fh?.close().catch(() => {});
    if (this.tempPath && !this.complete) await rm(this.tempPath, { force: true }).catch(() => {});
    this.onError(err);
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.writes]);
    const fh = this.fh;
    this.fh = undefined;
    await fh?.close().catch(() => {});
    if (this.tempPath && !this.complete) await rm(this.tempPath, { force: true }).catch(() => {});
    await this.inner.close();
  }
}

/**
 * A new cache file's private temporary file, after making room under the cap (cache-eviction.ts); undefined when the
 * dataset does not fit (onError told why). The caller fills it, fsyncs it and renames it to `path`.
 */
export async function startCacheFile(
  dir: string, path: string, bytes: number, options: CacheOptions, onError: (err: unknown) => void,
): Promise<{ fh: FileHandle; tempPath: string } | undefined> {
  await mkdir(dir, { recursive: true });
  if (options.maxBytes !== undefined) {
    const room = await makeCacheRoom(dir, bytes, options.maxBytes);
    if (room.evicted.length > 0) options.onEvict?.(room.evicted);
    if (!room.fits) {
      const beside = room.fillingBytes > 0 ? ` beside the ${room.fillingBytes} bytes other jobs are filling` : '';
      onError(new Error(`the dataset's ${bytes} bytes do not fit the cache's ${options.maxBytes} (KMFLEET_CACHE_MAX_GB)${beside}`));
      return undefined;
    }
  }
  const tempPath = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.partial`;
  return { fh: await open(tempPath, 'w+'), tempPath };
}

/** Sorted, disjoint, merged [first, end) row intervals. */
export class RowIntervals {
  private spans: [number, number][] = [];

  covers(first: number, end: number): boolean {
    return this.spans.some(([a, b]) => a <= first && end <= b);
  }

  add(first: number, end: number): void {
    const all = [...this.spans, [first, end] as [number, number]].sort((x, y) => x[0] - y[0]);
    const merged: [number, number][] = [];
    for (const [a, b] of all) {
      const last = merged[merged.length - 1];
      if (last && a <= last[1]) last[1] = Math.max(last[1], b);
      else merged.push([a, b]);
    }
    this.spans = merged;
  }
}

// the in-memory variant (datasets up to config.memoryCacheBytes) has its own file; re-exported for existing importers
export { MemoryCachedRowSource, type MemoryCacheOptions } from './memory-cache.js';
