/**
 * A RowSource over a local .npy, .npz (a stored member), fvecs/bvecs or raw f32/f16 file: positional reads (pread, several in flight: parallel-read.ts)
 * straight into the caller's buffer, so the file is streamed and never loaded whole, and concurrent reads need no
 * shared file position. A Parquet file is read by row group (parquet-rows.ts), an Arrow IPC file or stream by record
 * batch (arrow-rows.ts), through positional reads too.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { DatasetFormatError } from '../formats/errors.js';
import { NPY_HEADER_PROBE_BYTES, npyHeaderLength, parseNpyHeader, type DatasetConversion, type DatasetDType, type DatasetLayout } from '../formats/npy-header.js';
import { npzLayout } from '../formats/npz.js';
import { parquetFile } from '../formats/parquet.js';
import { rawLayout } from '../formats/raw.js';
import type { RowDecoding } from '../formats/row-decoding.js';
import { VECS_HEADER_BYTES, vecsLayout } from '../formats/vecs.js';
import { readConverted } from './converted-read.js';
import { ArrowRows } from './arrow-rows.js';
import type { DecodedColumn } from './decoded-batches.js';
import { readFileRange } from './parallel-read.js';
import { ParquetRows } from './parquet-rows.js';
import { checkReadRange, checkRowRange, type FileRows, type RowSource } from './row-source.js';

export type DatasetFormat = 'npy' | 'npz' | 'parquet' | 'arrow' | 'fvecs' | 'bvecs' | 'f32' | 'f16';
/** formats told by a file's extension when none is given */
const BY_EXTENSION: Record<string, DatasetFormat> = {
  npy: 'npy', npz: 'npz', parquet: 'parquet', arrow: 'arrow', arrows: 'arrow', feather: 'arrow', fvecs: 'fvecs', bvecs: 'bvecs',
};

export interface LocalFileSourceOptions {
  /** default: by the extension (*.npy, *.npz, *.parquet, *.arrow, *.arrows, *.feather, *.fvecs, *.bvecs), else required */
  format?: DatasetFormat;
  /** npz: the member to read (default: the only array, or arr_0) */
  member?: string;
  /** parquet, arrow: the embedding column (default: the only column) */
  column?: string;
  /** required for raw formats */
  dims?: number;
  /** 'f64-to-f32': accept a float64 .npy (or a Parquet or Arrow column of doubles), delivered as float32 rows (`kmfleet fit --convert`) */
  convert?: DatasetConversion;
}

export class LocalFileSource implements RowSource {
  readonly rows: number;
  readonly dims: number;
  readonly dtype: DatasetDType;
  readonly rowBytes: number;
  readonly dataOffset: number;
  /** bytes of a row in the file (rowBytes unless converting) */
  readonly storedRowBytes: number;
  readonly convert: DatasetConversion | undefined;
  /** npz: the member read */
  readonly member: string | undefined;
  /** parquet, arrow: the embedding column read */
  readonly column: string | undefined;
  private readonly decoding: RowDecoding | undefined;
  /** parquet, arrow: the rows, decoded by batch */
  private readonly decoded: DecodedColumn | undefined;

  private constructor(
    private readonly fh: FileHandle,
    readonly path: string,
    readonly format: DatasetFormat,
    readonly fileSize: number,
    layout: DatasetLayout,
    member?: string,
    decoded?: DecodedColumn,
  ) {
    this.member = member;
    this.decoded = decoded;
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

  /** Open and validate a dataset file. Bad files reject with DatasetFormatError (a missing file with the fs error). */
  static async open(path: string, options: LocalFileSourceOptions = {}): Promise<LocalFileSource> {
    const format = options.format ?? BY_EXTENSION[/\.([a-z]+)$/.exec(path.toLowerCase())?.[1] ?? ''];
    if (!format) throw new DatasetFormatError(`cannot tell the format of ${path}: give one of npy, npz, parquet, arrow, fvecs, bvecs, f32, f16`);
    const fh = await open(path, 'r');
    try {
      const { size } = await fh.stat();
      let layout: DatasetLayout;
      let member: string | undefined;
      if (format === 'parquet' || format === 'arrow') {
        const fileReadAt = (position: number, length: number) => readAt(fh, position, length);
        const decoded = format === 'parquet' ? await ParquetRows.open(parquetFile(fileReadAt, size), options) : await ArrowRows.open(fileReadAt, size, options);
        return new LocalFileSource(fh, path, format, size, decodedLayout(decoded), undefined, decoded);
      } else if (format === 'npz') {
        ({ layout, member } = await npzLayout((position, length) => readAt(fh, position, length), size, options));
      } else if (format === 'fvecs' || format === 'bvecs') {
        layout = vecsLayout(format, await readAt(fh, 0, Math.min(size, VECS_HEADER_BYTES)), size, options.dims);
      } else if (format === 'npy') {
        let head = await readAt(fh, 0, Math.min(size, NPY_HEADER_PROBE_BYTES));
        const total = npyHeaderLength(head);
        if (total !== null && total > head.length && total <= size) head = await readAt(fh, 0, total);
        layout = parseNpyHeader(head, size, { convert: options.convert });
        if (options.dims !== undefined && options.dims !== layout.dims) {
          throw new DatasetFormatError(`${path} has ${layout.dims} dims, not the ${options.dims} given`);
        }
      } else {
        layout = rawLayout(format, size, options.dims);
      }
      return new LocalFileSource(fh, path, format, size, layout, member);
    } catch (err) {
      await fh.close();
      throw err;
    }
  }

  describe(): string {
    return `${this.path} (${describeLayout(this.format, this, this.member ?? this.column)}, ${this.rows} × ${this.dims})`;
  }

  async read(firstRow: number, count: number, target: Buffer): Promise<void> {
    checkReadRange(this, firstRow, count, target);
    if (this.decoded) return this.decoded.read(firstRow, count, target);
    if (this.decoding) {
      const layout = { decoding: this.decoding, dims: this.dims, rowBytes: this.rowBytes, storedRowBytes: this.storedRowBytes };
      return readConverted(layout, firstRow, count, target, undefined, (scratch) => this.readStored(firstRow, count, scratch));
    }
    return this.readStored(firstRow, count, target);
  }

  fileRows(firstRow: number, count: number): FileRows | undefined {
    checkRowRange(this, firstRow, count);
    if (this.decoded || this.decoding) return undefined;
    return { fd: this.fh.fd, offset: this.dataOffset + firstRow * this.storedRowBytes };
  }

  /** The rows' bytes as stored, into target. */
  private async readStored(firstRow: number, count: number, target: Buffer): Promise<void> {
    const position = this.dataOffset + firstRow * this.storedRowBytes;
    await readFileRange(this.fh, target, position, count * this.storedRowBytes,
      () => new DatasetFormatError(`${this.path} ended early (was it truncated while being read?)`));
  }

  async close(): Promise<void> {
    await this.fh.close().catch(() => undefined);
  }
}

async function readAt(fh: FileHandle, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const { bytesRead } = await fh.read(buf, done, length - done, position + done);
    if (bytesRead === 0) break;
    done += bytesRead;
  }
  return buf.subarray(0, done);
}

/**
 * "npy <f4", "npz arr_0.npy <f8 read as <f4", "parquet column emb <f4", "fvecs", "raw f16": the kind of file in a
 * source's describe(); `member` is the npz member or the Parquet or Arrow column.
 */
export function describeLayout(format: DatasetFormat, l: { dtype: DatasetDType; convert?: DatasetConversion }, member?: string): string {
  const npy = l.convert ? '<f8 read as <f4' : `<${l.dtype === 'f32' ? 'f4' : 'f2'}`;
  if (format === 'npy') return `npy ${npy}`;
  if (format === 'parquet' || format === 'arrow') return `${format} column ${member} ${npy}`;
  if (format === 'npz') return `npz ${member} ${npy}`;
  if (format === 'fvecs' || format === 'bvecs') return format === 'bvecs' ? 'bvecs read as f32' : 'fvecs';
  return `raw ${format}`;
}

/** A Parquet or Arrow column's rows as a layout (no byte offsets: ParquetRows or ArrowRows read them). */
export function decodedLayout(p: DecodedColumn): DatasetLayout {
  const itemSize = p.dtype === 'f32' ? 4 : 2;
  return {
    dtype: p.dtype, rows: p.rows, dims: p.dims, dataOffset: 0, fortranOrder: false, itemSize, rowBytes: p.rowBytes,
    storedRowBytes: p.rowBytes, ...(p.convert ? { convert: p.convert } : {}),
  };
}
