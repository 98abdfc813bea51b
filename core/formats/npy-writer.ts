/**
 * Streaming .npy writer: the header first (the shape is known up front), then the data appended chunk by chunk, so
 * that N assignments or a generated dataset never sit whole in memory. It counts the bytes (close() refuses a file
 * whose data does not match its header) and hashes them (sha256 for summary.json).
 *
 * The bytes go to a ByteSink: a local file here; the pipeline can wrap an S3 multipart upload the same way.
 */
import { createHash, type Hash } from 'node:crypto';
import { open, rm, type FileHandle } from 'node:fs/promises';
import { encodeNpyHeader, NPY_ITEM_SIZE, type NpyDescr } from './npy-encode.js';

export interface ByteSink {
  /** append bytes; the caller may reuse `chunk` once the promise resolves */
  write(chunk: Uint8Array): Promise<void>;
  /** flush and close; the bytes are complete */
  end(): Promise<void>;
  /** give up: close and discard what was written (never throws) */
  abort(): Promise<void>;
}

export function fileSink(path: string): ByteSink {
  let fh: FileHandle | undefined;
  let opening: Promise<FileHandle> | undefined;
  const handle = () => (opening ??= open(path, 'w').then((h) => (fh = h)));
  return {
    async write(chunk) {
      const h = await handle();
      let off = 0;
      while (off < chunk.byteLength) {
        const { bytesWritten } = await h.write(chunk, off, chunk.byteLength - off);
        off += bytesWritten;
      }
    },
    async end() {
      const h = await handle();
      await h.sync();
      await h.close();
    },
    async abort() {
      try { await fh?.close(); } catch { /* already closed */ }
      await rm(path, { force: true });
    },
  };
}

export interface NpyWriteResult {
  bytes: number;
  sha256: string;
}

export class NpyWriter {
  readonly descr: NpyDescr;
  readonly shape: readonly number[];
  /** bytes of data (after the header) the shape requires */
  readonly dataBytes: number;
  private written = 0;
  private headerBytes = 0;
  private readonly hash: Hash = createHash('sha256');
  private state: 'new' | 'open' | 'closed' = 'new';

  constructor(private readonly sink: ByteSink, descr: NpyDescr, shape: readonly number[]) {
    this.descr = descr;
    this.shape = [...shape];
    this.dataBytes = shape.reduce((a, b) => a * b, 1) * NPY_ITEM_SIZE[descr];
  }

  /** A writer to a local file (created or truncated). */
  static toFile(path: string, descr: NpyDescr, shape: readonly number[]): NpyWriter {
    return new NpyWriter(fileSink(path), descr, shape);
  }

  /** Append data: a typed array or raw bytes, any length as long as the total ends up matching the shape. */
  async write(chunk: ArrayBufferView): Promise<void> {
    if (this.state === 'closed') throw new Error('NpyWriter: write after close');
    if (this.state === 'new') await this.writeHeader();
    const bytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.written + bytes.byteLength > this.dataBytes) {
      throw new RangeError(`NpyWriter: ${this.written + bytes.byteLength} bytes exceed the ${this.dataBytes} of shape (${this.shape.join(', ')})`);
    }
    this.hash.update(bytes);
    await this.sink.write(bytes);
    this.written += bytes.byteLength;
  }

  /** Finish the file; throws (and discards it) if fewer bytes than the shape needs were written. */
  async close(): Promise<NpyWriteResult> {
    if (this.state === 'closed') throw new Error('NpyWriter: closed twice');
    if (this.state === 'new') await this.writeHeader();
    if (this.written !== this.dataBytes) {
      await this.abort();
      throw new RangeError(`NpyWriter: wrote ${this.written} of the ${this.dataBytes} data bytes of shape (${this.shape.join(', ')})`);
    }
    this.state = 'closed';
    await this.sink.end();
    return { bytes: this.headerBytes + this.written, sha256: this.hash.digest('hex') };
  }

  async abort(): Promise<void> {
    this.state = 'closed';
    await this.sink.abort();
  }

  private async writeHeader(): Promise<void> {
    const header = encodeNpyHeader(this.descr, this.shape);
    this.state = 'open';
    this.headerBytes = header.length;
    this.hash.update(header);
    await this.sink.write(header);
  }
}
