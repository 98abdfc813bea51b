/**
 * Where the messages of an Arrow IPC file or stream lie, and how many rows each record batch holds, read from their
 * small metadata alone so that the bodies (the rows) are read only when a batch is decoded. @uwdata/flechette decodes
 * messages but reads only whole files, so the framing and the few FlatBuffers fields needed here (Message.fbs:
 * header type, bodyLength, RecordBatch.length and .compression, DictionaryBatch.data; File.fbs: the footer's blocks)
 * are read by hand.
 * Any offset that points outside the bytes read is a DatasetFormatError, never a RangeError. The vectors that
 * flechette sizes its lists by (a schema's fields, a batch's nodes and buffers) are checked here before it decodes.
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

  get length(): number {
    return this.bytes.length;
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
    // as flechette reads it: a slot that starts inside the vtable is there (a damaged size may cut it in two)
    if (slot >= vtableSize) return undefined;
    this.check(vtable + slot, 2);
    const offset = this.view.getUint16(vtable + slot, true);
    return offset === 0 ? undefined : table + offset;
  }

  /** the table or vector an offset field at `at` points to */
  target(at: number): number {
    return at + this.i32(at);
  }

  /**
   * The vector an offset field at `at` points to: its first element and its length, all `stride`-byte elements inside
   * the bytes. (@uwdata/flechette builds a list as long as a vector's length says, whatever the bytes hold.)
   */
  vector(at: number, stride: number): { start: number; count: number } {
    const v = this.target(at);
    const count = this.i32(v);
    if (count < 0) throw new DatasetFormatError(`${this.what} is damaged: a vector of ${count} elements`);
    this.check(v + 4, count * stride);
    return { start: v + 4, count };
  }
}

/** Schema.fbs: Type union ids and Field / Schema / Union fields that hold vectors */
const TYPE_UNION = 14;
/** nested types deeper than this are refused (a damaged file may nest a field in itself) */
const MAX_FIELD_DEPTH = 64;

/**
 * Every vector of a Schema message's fields (Schema.fbs: fields, children, custom metadata, features, a union's type
 * ids) lies inside its bytes, fields nest at most MAX_FIELD_DEPTH deep, and no more fields are reached than the bytes
 * can hold: what flechette takes on trust before it decodes the schema.
 */
function checkSchema(fb: FlatBuffer, schema: number, what: string): void {
  let budget = fb.length / 4; // a field table takes at least 4 bytes: more visits mean fields reached twice
  const optionalVector = (table: number, index: number, stride: number) => {
    const at = fb.field(table, index);
    return at === undefined ? { start: 0, count: 0 } : fb.vector(at, stride);
  };
  const fields = (vector: { start: number; count: number }, depth: number): void => {
    if (depth > MAX_FIELD_DEPTH) throw new DatasetFormatError(`${what} is damaged: its fields nest deeper than ${MAX_FIELD_DEPTH} levels`);
    for (let i = 0; i < vector.count; i++) {
      if (--budget < 0) throw new DatasetFormatError(`${what} is damaged: its fields refer to each other`);
      const field = fb.target(vector.start + 4 * i);
      optionalVector(field, 6, 4);
      const typeTypeAt = fb.field(field, 2);
      const typeAt = fb.field(field, 3);
      if (typeTypeAt !== undefined && typeAt !== undefined && fb.u8(typeTypeAt) === TYPE_UNION) optionalVector(fb.target(typeAt), 1, 4);
      fields(optionalVector(field, 5, 4), depth + 1);
    }
  };
  fields(optionalVector(schema, 1, 4), 0);
  optionalVector(schema, 2, 4);
  optionalVector(schema, 3, 8);
}

/** A RecordBatch's vectors (Message.fbs: nodes, buffers, variadic buffer counts) lie inside the metadata's bytes. */
function checkRecordBatch(fb: FlatBuffer, batch: number): void {
  for (const [index, stride] of [[1, 16], [2, 16], [4, 8]] as const) {
    const at = fb.field(batch, index);
    if (at !== undefined) fb.vector(at, stride);
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
  if (type === MESSAGE_SCHEMA) {
    const headerAt = fb.field(message, 2);
    if (headerAt !== undefined) checkSchema(fb, fb.target(headerAt), what);
  }
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
    checkRecordBatch(fb, batch);
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
