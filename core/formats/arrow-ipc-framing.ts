/**
 * Where the messages of an Arrow IPC file or stream lie, and how many rows each record batch holds, read from their
 * small metadata alone so that the bodies (the rows) are read only when a batch is decoded. @uwdata/flechette decodes
 * messages but reads only whole files, so the framing and the few FlatBuffers fields needed here (Message.fbs:
 * header type, bodyLength, RecordBatch.length and .compression, DictionaryBatch.data; File.fbs: the footer's blocks)
 * are read by hand.
 * Any offset that points outside the bytes read is a DatasetFormatError, never a RangeError.
 */
import { DatasetFormatError } from './errors.js';

/** Message.fbs's MessageHeader union */
export const MESSAGE_SCHEMA = 1;
export const MESSAGE_DICTIONARY_BATCH = 2;
export const MESSAGE_RECORD_BATCH = 3;
/** Message.fbs's CompressionType, by id */
export const ARROW_CODECS = ['LZ4_FRAME', 'ZSTD'] as const;
export type ArrowCodec = (typeof ARROW_CODECS)[number];
/** Message.fbs's BodyCompressionMethod: each buffer compressed on its own (the only method defined) */
export const COMPRESSION_METHOD_BUFFER = 0;

/** A batch's BodyCompression: `codec` is a name, or `codec N` for an id Arrow does not define. */
export interface BodyCompression {
  codec: ArrowCodec | `codec ${number}`;
  method: number;
}

/** The head of one encapsulated message: its prefix and FlatBuffers metadata, not its body. */
export interface MessageHead {
  /** bytes from the message's start to its body (prefix, metadata and padding) */
  headLength: number;
  bodyLength: number;
  type: number;
  /** record batches: rows */
  rows?: number;
  /** record and dictionary batches: how its buffers are compressed, if they are */
  compression?: BodyCompression;
}

/** A message's place in the file: [offset, offset + length). */
export interface MessageBlock {
  offset: number;
  length: number;
}

/** A footer's Block: where a message starts, the bytes of its head (prefix, metadata, padding) and of its body. */
export interface FooterBlock {
  offset: number;
  headLength: number;
  bodyLength: number;
}

/** A read-only view of FlatBuffers tables in `bytes`, bounds-checked. */
class FlatBuffer {
  private readonly view: DataView;

  constructor(private readonly bytes: Uint8Array, private readonly what: string) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private check(at: number, size: number): void {
    if (!Number.isInteger(at) || at < 0 || at + size > this.bytes.length) {
      throw new DatasetFormatError(`${this.what} is damaged: an offset points outside its ${this.bytes.length} bytes`);
    }
  }

  u8(at: number): number {
    this.check(at, 1);
    return this.view.getUint8(at);
  }

  i32(at: number): number {
    this.check(at, 4);
    return this.view.getInt32(at, true);
  }

  i64(at: number): number {
    this.check(at, 8);
    const v = this.view.getBigInt64(at, true);
    if (v < 0n || v > BigInt(Number.MAX_SAFE_INTEGER)) throw new DatasetFormatError(`${this.what} is damaged: a length of ${v}`);
    return Number(v);
  }

  /** the root table's position */
  root(): number {
    return this.i32(0);
  }

  /** the position of field `index` of the table at `table`, or undefined where the field is absent */
  field(table: number, index: number): number | undefined {
    const vtable = table - this.i32(table);
    this.check(vtable, 4);
    const vtableSize = this.view.getUint16(vtable, true);
    const slot = 4 + 2 * index;
    if (slot + 2 > vtableSize) return undefined;
    this.check(vtable + slot, 2);
    const offset = this.view.getUint16(vtable + slot, true);
    return offset === 0 ? undefined : table + offset;
  }

  /** the table or vector an offset field at `at` points to */
  target(at: number): number {
    return at + this.i32(at);
  }
}

/**
 * Reads the message head at the start of `bytes` (a message's first bytes: at least its prefix and metadata, or
 * `needed` says how many are). Returns null at an end-of-stream marker.
 */
export function parseMessageHead(bytes: Uint8Array, what: string): MessageHead | null | { needed: number } {
  if (bytes.length < 4) return { needed: 8 };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let prefix = 4;
  let metadataLength = view.getInt32(0, true);
  // 0xFFFFFFFF then the length; before Arrow 0.15 the length came alone
  if (metadataLength === -1) {
    if (bytes.length < 8) return { needed: 8 };
    prefix = 8;
    metadataLength = view.getInt32(4, true);
  }
  if (metadataLength === 0) return null;
  if (metadataLength < 0) throw new DatasetFormatError(`${what} is not an Arrow IPC message (a metadata length of ${metadataLength})`);
  const headLength = prefix + metadataLength;
  if (bytes.length < headLength) return { needed: headLength };
  const fb = new FlatBuffer(bytes.subarray(prefix, headLength), what);
  const message = fb.root();
  const typeAt = fb.field(message, 1);
  const type = typeAt === undefined ? 0 : fb.u8(typeAt);
  const bodyAt = fb.field(message, 3);
  const head: MessageHead = { headLength, bodyLength: bodyAt === undefined ? 0 : fb.i64(bodyAt), type };
  if (type === MESSAGE_RECORD_BATCH || type === MESSAGE_DICTIONARY_BATCH) {
    const headerAt = fb.field(message, 2);
    if (headerAt === undefined) throw new DatasetFormatError(`${what} is a ${type === MESSAGE_RECORD_BATCH ? 'record' : 'dictionary'} batch without its header`);
    let batch = fb.target(headerAt);
    // a DictionaryBatch holds its values as a RecordBatch (field 1, after the dictionary's id)
    if (type === MESSAGE_DICTIONARY_BATCH) {
      const dataAt = fb.field(batch, 1);
      if (dataAt === undefined) return head;
      batch = fb.target(dataAt);
    }
    const lengthAt = fb.field(batch, 0);
    if (type === MESSAGE_RECORD_BATCH) head.rows = lengthAt === undefined ? 0 : fb.i64(lengthAt);
    const compressionAt = fb.field(batch, 3);
    if (compressionAt !== undefined) {
      const compression = fb.target(compressionAt);
      const codecAt = fb.field(compression, 0);
      const methodAt = fb.field(compression, 1);
      const codec = codecAt === undefined ? 0 : fb.u8(codecAt);
      head.compression = { codec: ARROW_CODECS[codec] ?? `codec ${codec}`, method: methodAt === undefined ? COMPRESSION_METHOD_BUFFER : fb.u8(methodAt) };
    }
  }
  return head;
}

/** The record batch and dictionary blocks of an Arrow IPC file's footer (File.fbs). */
export function parseFooterBlocks(footer: Uint8Array): { recordBatches: FooterBlock[]; dictionaries: FooterBlock[] } {
  const fb = new FlatBuffer(footer, 'Arrow IPC file footer');
  const root = fb.root();
  const blocks = (index: number): FooterBlock[] => {
    const at = fb.field(root, index);
    if (at === undefined) return [];
    const vector = fb.target(at);
    const count = fb.i32(vector);
    const out: FooterBlock[] = [];
    // Block: offset int64, metaDataLength int32 (+4 padding), bodyLength int64
    for (let i = 0; i < count; i++) {
      const b = vector + 4 + 24 * i;
      out.push({ offset: fb.i64(b), headLength: fb.i32(b + 8), bodyLength: fb.i64(b + 16) });
    }
    return out;
  };
  return { dictionaries: blocks(2), recordBatches: blocks(3) };
}
