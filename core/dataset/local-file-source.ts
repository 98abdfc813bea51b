/**
 * A RowSource over a local .npy or raw f32/f16 file: positional reads (pread, several in flight: parallel-read.ts)
 * straight into the caller's buffer, so the file is streamed and never loaded whole, and concurrent reads need no
 * shared file position.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { DatasetFormatError } from '../formats/errors.js';
import { NPY_HEADER_PROBE_BYTES, npyHeaderLength, parseNpyHeader, type DatasetConversion, type DatasetDType, type DatasetLayout } from '../formats/npy-header.js';
import { rawLayout } from '../formats/raw.js';
import { readConverted } from './converted-read.js';
import { readFileRange } from './parallel-read.js';
import { checkReadRange, type RowSource } from './row-source.js';

export type DatasetFormat = 'npy' | 'f32' | 'f16';

export interface LocalFileSourceOptions {
  /** default: 'npy' for *.npy, else required */
  format?: DatasetFormat;
  /** required for raw formats */
  dims?: number;
  /** 'f64-to-f32': accept a float64 .npy, delivered as float32 rows (`kmfleet fit --convert`) */
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

  private constructor(
    private readonly fh: FileHandle,
    readonly path: string,
    readonly format: DatasetFormat,
    readonly fileSize: number,
    layout: DatasetLayout,
  ) {
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
    const format = options.format ?? (path.toLowerCase().endsWith('.npy') ? 'npy' : undefined);
    if (!format) throw new DatasetFormatError(`cannot tell the format of ${path}: give one of npy, f32, f16`);
    const fh = await open(path, 'r');
    try {
      const { size } = await fh.stat();
      let layout: DatasetLayout;
      if (format === 'npy') {
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
      return new LocalFileSource(fh, path, format, size, layout);
    } catch (err) {
      await fh.close();
      throw err;
    }
  }

  describe(): string {
    const kind = this.format === 'npy' ? (this.convert ? 'npy <f8 read as <f4' : `npy <${this.dtype === 'f32' ? 'f4' : 'f2'}`) : `raw ${this.format}`;
    return `${this.path} (${kind}, ${this.rows} × ${this.dims})`;
  }

  async read(firstRow: number, count: number, target: Buffer): Promise<void> {
    checkReadRange(this, firstRow, count, target);
    if (this.convert) return readConverted(count, this.dims, target, undefined, (scratch) => this.readStored(firstRow, count, scratch));
    return this.readStored(firstRow, count, target);
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
