/**
 * Where the rows of a dataset come from: a local file, S3, a cache. The k-means driver reads whole rows through this
 * interface only, so the same driver runs `kmfleet fit` on a local file and a worker's job on S3.
 */
import type { DatasetDType } from '../formats/npy-header.js';

/** How a caller would like a read done; sources that have no choice ignore it. */
export interface ReadHint {
  /**
   * The caller already runs its reads in parallel (the memory cache's block scheduler): fetch the range with one
   * request instead of splitting it into parallel parts.
   */
  oneRequest?: boolean;
  /**
   * With oneRequest: called as the range fills, with the bytes in place from the start of target (a retry may start
   * again from 0 with the same bytes: keep the largest value). Lets a caller use the first rows of a large read early.
   */
  onProgress?: (bytes: number) => void;
}

/** Where rows lie in a local file (RowSource.fileRows). */
export interface FileRows {
  fd: number;
  offset: number;
}

export interface RowSource {
  readonly rows: number;
  readonly dims: number;
  readonly dtype: DatasetDType;
  /** dims × bytes per element */
  readonly rowBytes: number;
  /** for logs and summaries, e.g. "data.npy (npy <f4, 1000000 × 32)" */
  describe(): string;
  /**
   * Fill target[0 .. count×rowBytes) with rows [firstRow, firstRow+count), little-endian as stored.
   * Rejects when the range is outside the dataset or target is too small. Calls may overlap.
   */
  read(firstRow: number, count: number, target: Buffer, hint?: ReadHint): Promise<void>;
  /**
   * Sources that hold the rows in memory (the memory cache): the rows [firstRow, firstRow+count) in place, without a
   * copy, once they are there. Read-only, and valid only until close(). Callers that pick scattered rows (an init
   * sample) copy just those instead of whole spans.
   */
  view?(firstRow: number, count: number): Promise<Buffer>;
  /**
   * Sources whose rows [firstRow, firstRow+count) lie one after another in a local file, exactly as read() would
   * deliver them (an uncompressed .npy, raw file or stored .npz member; the pod's complete cache file): the open file's
   * descriptor and the byte where row firstRow starts, for an engine that reads them itself (Engine.feedFile).
   * Undefined where they do not. The descriptor stays open until close().
   */
  fileRows?(firstRow: number, count: number): FileRows | undefined;
  close(): Promise<void>;
}

/** Shared argument check for RowSource implementations: rows inside the dataset. */
export function checkRowRange(source: RowSource, firstRow: number, count: number): void {
  if (!Number.isSafeInteger(firstRow) || !Number.isSafeInteger(count) || firstRow < 0 || count < 0 || firstRow + count > source.rows) {
    throw new RangeError(`read of rows [${firstRow}, ${firstRow + count}) outside the dataset's ${source.rows} rows`);
  }
}

/** Shared argument check for RowSource implementations: rows inside the dataset, a target large enough. */
export function checkReadRange(source: RowSource, firstRow: number, count: number, target: Buffer): void {
  checkRowRange(source, firstRow, count);
  if (target.length < count * source.rowBytes) {
    throw new RangeError(`read target of ${target.length} bytes is smaller than ${count} rows of ${source.rowBytes} bytes`);
  }
}
