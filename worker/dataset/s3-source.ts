/**
 * A RowSource over an S3 object (DESIGN.md, steps 1 and 4): an npy, fvecs or bvecs file is opened with ONE ranged
 * GET of its first bytes, large enough for the longest header the parser accepts, whose answer also gives the
 * object's size and ETag (a HEAD before it cost a second round trip before the download could start); a raw file
 * needs only a HEAD; an npz a HEAD and three small ranged GETs (its end, central directory, member header); a Parquet
 * file a HEAD, its footer and its first row group (the dims), then whole row groups decoded as read (parquet-rows.ts);
 * an Arrow IPC file a HEAD, its footer and each record batch's head (a stream: each message's head in turn), then
 * whole record batches decoded as read (arrow-rows.ts). Rows are
 * read with parallel ranged GETs straight into the caller's buffer (the engine's host buffer): no staging copy.
 *
 * Every GET carries the ETag seen at open as If-Match and compares the ETag of the answer, so a dataset replaced
 * mid-job fails with S3ObjectChangedError instead of mixing two versions (s3rver ignores If-Match; the compare
 * catches it there).
 */
import { ArrowRows, checkReadRange, DatasetFormatError, decodedLayout, describeLayout, NPY_MAX_HEADER_BYTES, NPY_PREFIX_BYTES, npzLayout, parquetFile, ParquetRows, parseNpyHeader, rawLayout, readConverted, VECS_HEADER_BYTES, vecsLayout, type DatasetConversion, type DatasetDType, type DatasetLayout, type DecodedColumn, type ReadHint, type RowDecoding, type RowSource } from '../../core/index.js';
import type { S3Handle } from '../s3/client.js';
import { headObject, readObjectStart, readRangeInto, type ObjectInfo } from '../s3/objects.js';
import { formatS3Uri, parseS3UriOf, type S3Location } from '../s3/uri.js';

export type S3DatasetFormat = 'npy' | 'npz' | 'parquet' | 'arrow' | 'fvecs' | 'bvecs' | 'f32' | 'f16';

export interface S3RowSourceOptions {
  format: S3DatasetFormat;
  /** npz: the member to read (default: the only array, or arr_0) */
  member?: string;
  /** parquet, arrow: the embedding column (default: the only column) */
  column?: string;
  /** required for raw formats; checked against the header for npy */
  dims?: number;
  /** 'f64-to-f32': accept a float64 .npy, delivered as float32 rows (the spec's dataset.convert) */
  convert?: DatasetConversion;
  /** bytes per ranged GET (8–64 MiB in production; smaller in tests) */
  partBytes?: number;
  /** ranged GETs in flight per read() */
  concurrency?: number;
  /** pin a specific version (a resumed job must see the data its checkpoint was computed on) */
  expectEtag?: string;
  signal?: AbortSignal;
}

export const DEFAULT_PART_BYTES = 16 * 1024 * 1024;
export const DEFAULT_READ_CONCURRENCY = 8;
/** reads are not split into parts smaller than this */
export const MIN_SPLIT_BYTES = 4 * 1024 * 1024;

/** Counters for the pipeline's timing split (download vs compute). */
export interface S3ReadStats {
  requests: number;
  bytes: number;
  /** wall ms spent inside read() (overlapping reads counted once each) */
  readMs: number;
}

export class S3RowSource implements RowSource {
  readonly rows: number;
  readonly dims: number;
  readonly dtype: DatasetDType;
  readonly rowBytes: number;
  readonly dataOffset: number;
  /** bytes of a row in the object (rowBytes unless converting) */
  readonly storedRowBytes: number;
  readonly convert: DatasetConversion | undefined;
  readonly stats: S3ReadStats;
  /** npz: the member read */
  readonly member: string | undefined;
  /** parquet, arrow: the embedding column read */
  readonly column: string | undefined;
  private readonly decoding: RowDecoding | undefined;
  /** parquet, arrow: the rows, decoded by batch */
  private readonly decoded: DecodedColumn | undefined;
  private closed = false;

  private constructor(
    private readonly s3: S3Handle,
    readonly location: S3Location,
    readonly format: S3DatasetFormat,
    readonly size: number,
    readonly etag: string,
    layout: DatasetLayout,
    private readonly partBytes: number,
    private readonly concurrency: number,
    private readonly signal: AbortSignal | undefined,
    member: string | undefined,
    stats: S3ReadStats,
    decoded: DecodedColumn | undefined,
  ) {
    this.stats = stats;
    this.decoded = decoded;
    this.member = member;
    this.column = decoded?.column;
    this.decoding = layout.decoding;
    this.rows = layout.rows;
    this.dims = layout.dims;
    this.dtype = layout.dtype;
    this.rowBytes = layout.rowBytes;
    this.dataOffset = layout.dataOffset;
    this.storedRowBytes = layout.storedRowBytes;
    this.convert = layout.convert;
  }

  get uri(): string {
    return formatS3Uri(this.location);
  }

  /**
   * Open and validate. A missing object rejects with S3ObjectNotFoundError, a bad header or size with
   * DatasetFormatError (both user errors), an ETag other than `expectEtag` with DatasetFormatError too.
   */
  static async open(s3: S3Handle, uri: string, options: S3RowSourceOptions): Promise<S3RowSource> {
    const location = parseS3UriOf('dataset.uri', uri, 'object');
    const probe = options.format === 'npy' ? NPY_PREFIX_BYTES + NPY_MAX_HEADER_BYTES : options.format === 'fvecs' || options.format === 'bvecs' ? VECS_HEADER_BYTES : 0;
    const start = probe > 0 ? await readObjectStart(s3, location, probe, options.signal) : undefined;
    const info: ObjectInfo = start ?? (await headObject(s3, location, options.signal));
    if (options.expectEtag !== undefined && options.expectEtag !== info.etag) {
      throw new DatasetFormatError(`${uri} has ETag ${info.etag}, not the ${options.expectEtag} this job was started on`);
    }
    let layout: DatasetLayout;
    let member: string | undefined;
    let decoded: DecodedColumn | undefined;
    const stats: S3ReadStats = { requests: 0, bytes: 0, readMs: 0 };
    const readAt = async (position: number, length: number) => {
      const bytes = Buffer.allocUnsafe(Math.max(0, Math.min(length, info.size - position)));
      await readRangeInto(s3, location, position, bytes.length, bytes, 0, { etag: info.etag, signal: options.signal });
      // a Parquet or Arrow file's rows come through here (row groups, record batches): count them like the ranged GETs of rows
      if (options.format === 'parquet' || options.format === 'arrow') {
        stats.requests++;
        stats.bytes += bytes.length;
      }
      return bytes;
    };
    if (options.format === 'parquet' || options.format === 'arrow') {
      decoded = options.format === 'parquet' ? await ParquetRows.open(parquetFile(readAt, info.size), options) : await ArrowRows.open(readAt, info.size, options);
      layout = decodedLayout(decoded);
    } else if (options.format === 'npz') {
      ({ layout, member } = await npzLayout(readAt, info.size, options));
    } else if (start && options.format !== 'npy') {
      layout = vecsLayout(options.format as 'fvecs' | 'bvecs', start.bytes, info.size, options.dims);
    } else if (start) {
      if (info.size < NPY_PREFIX_BYTES) throw new DatasetFormatError(`${uri} is ${info.size} bytes: too short for a .npy file`);
      layout = parseNpyHeader(start.bytes, info.size, { convert: options.convert });
      if (options.dims !== undefined && options.dims !== layout.dims) {
        throw new DatasetFormatError(`${uri} has ${layout.dims} dims, not the ${options.dims} the spec gives`);
      }
    } else {
      layout = rawLayout(options.format as 'f32' | 'f16', info.size, options.dims);
    }
    const partBytes = Math.max(layout.storedRowBytes, options.partBytes ?? DEFAULT_PART_BYTES);
    return new S3RowSource(
      s3,
      location,
      options.format,
      info.size,
      info.etag,
      layout,
      partBytes,
      Math.max(1, options.concurrency ?? DEFAULT_READ_CONCURRENCY),
      options.signal,
      member,
      stats,
      decoded,
    );
  }

  describe(): string {
    return `${this.uri} (${describeLayout(this.format, this, this.member ?? this.column)}, ${this.rows} × ${this.dims}, ETag ${this.etag})`;
  }

  async read(firstRow: number, count: number, target: Buffer, hint?: ReadHint): Promise<void> {
    if (this.closed) throw new Error(`${this.uri}: read after close`);
    checkReadRange(this, firstRow, count, target);
    if (this.decoded) {
      const t0 = performance.now();
      await this.decoded.read(firstRow, count, target);
      this.stats.readMs += performance.now() - t0;
      return;
    }
    if (this.decoding) {
      const layout = { decoding: this.decoding, dims: this.dims, rowBytes: this.rowBytes, storedRowBytes: this.storedRowBytes };
      return readConverted(layout, firstRow, count, target, hint, (scratch, h) => this.readStored(firstRow, count, scratch, h));
    }
    return this.readStored(firstRow, count, target, hint);
  }

  /** The rows' bytes as stored, into target. */
  private async readStored(firstRow: number, count: number, target: Buffer, hint?: ReadHint): Promise<void> {
    const t0 = performance.now();
    const total = count * this.storedRowBytes;
    const start = this.dataOffset + firstRow * this.storedRowBytes;
    // Byte ranges, not rows, so the split never depends on dims. A read smaller than `concurrency` parts is still split
    // (down to MIN_SPLIT_BYTES) so that one chunk comes over several connections: one S3 stream is far slower than
    // the NIC, and callers often read one engine buffer (a few MB) at a time.
    // With hint.oneRequest the caller schedules its own parallel block reads: one GET per read.
    const part = hint?.oneRequest ? Math.max(1, total) : Math.min(this.partBytes, Math.max(MIN_SPLIT_BYTES, Math.ceil(total / this.concurrency)));
    const parts: { offset: number; length: number }[] = [];
    for (let off = 0; off < total; off += part) parts.push({ offset: off, length: Math.min(part, total - off) });
    // On the first failure the other lanes stop and in-flight GETs are aborted; read() settles only after every lane
    // has, so nothing writes into target once the caller has it back.
    const stop = new AbortController();
    const signal = this.signal ? AbortSignal.any([this.signal, stop.signal]) : stop.signal;
    let next = 0;
    let firstError: unknown;
    const lane = async () => {
      while (next < parts.length && !signal.aborted) {
        const p = parts[next++];
        const onProgress = parts.length === 1 ? hint?.onProgress : undefined;
        await readRangeInto(this.s3, this.location, start + p.offset, p.length, target, p.offset, { etag: this.etag, signal, onProgress });
        this.stats.requests++;
        this.stats.bytes += p.length;
      }
    };
    const results = await Promise.allSettled(
      Array.from({ length: Math.min(this.concurrency, parts.length) }, () =>
        lane().catch((err) => {
          if (firstError === undefined) firstError = err;
          stop.abort();
          throw err;
        }),
      ),
    );
    if (results.some((r) => r.status === 'rejected')) throw firstError;
    this.stats.readMs += performance.now() - t0;
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}
