/**
 * Arrow IPC datasets — the file format (.arrow, Feather v2) and the stream format (.arrows), told apart by their
 * first bytes: one column whose every row is an embedding, a FixedSizeList or List (LargeList) of float32, float16
 * or (with convert 'f64-to-f32') float64 values, as pyarrow, polars and DuckDB write a vector column. This module
 * indexes the file without reading its rows: the schema (decoded by @uwdata/flechette), then each record batch's
 * place, row count and compression (LZ4_FRAME or ZSTD, arrow-codecs.ts) from its metadata (the file's footer points
 * at them; a stream is walked message by message). Rows are decoded by record batch in dataset/arrow-rows.ts.
 *
 * flechette is imported lazily, so processes that never open an Arrow file never load it.
 */
import type { Field, Schema } from '@uwdata/flechette';
import {
  ARROW_CODECS, COMPRESSION_METHOD_BUFFER, MESSAGE_DICTIONARY_BATCH, MESSAGE_RECORD_BATCH, MESSAGE_SCHEMA, parseFooterBlocks, parseMessageHead,
  type ArrowCodec, type BodyCompression, type MessageBlock, type MessageHead,
} from './arrow-ipc-framing.js';
import { DatasetFormatError } from './errors.js';
import type { DatasetConversion, DatasetDType } from './npy-header.js';
import type { ReadAt } from './npz.js';

/** the file format's magic, at its start (padded to 8 bytes) and its end (after the footer's int32 length) */
const MAGIC = 'ARROW1';
const FILE_TAIL_BYTES = MAGIC.length + 4;
const FILE_HEAD_BYTES = 8;
/** bytes read at a message's start: enough for a record batch's metadata unless the batch has very many columns */
const MESSAGE_PROBE_BYTES = 4096;
/** message heads read at once when the footer gives their places */
const HEAD_READS_IN_FLIGHT = 8;

/** flechette's Type ids and Float precisions (its constants, not imported so that this module loads without it) */
const TYPE_FLOAT = 3;
const TYPE_LIST = 12;
const TYPE_FIXED_SIZE_LIST = 16;
const TYPE_LARGE_LIST = 21;
const TYPE_NAMES: Record<number, string> = {
  [-1]: 'Dictionary', 1: 'Null', 2: 'Int', 3: 'Float', 4: 'Binary', 5: 'Utf8', 6: 'Bool', 7: 'Decimal', 8: 'Date', 9: 'Time',
  10: 'Timestamp', 11: 'Interval', 12: 'List', 13: 'Struct', 14: 'Union', 15: 'FixedSizeBinary', 16: 'FixedSizeList', 17: 'Map',
  18: 'Duration', 19: 'LargeBinary', 20: 'LargeUtf8', 21: 'LargeList', 22: 'RunEndEncoded', 23: 'BinaryView', 24: 'Utf8View',
  25: 'ListView', 26: 'LargeListView',
};
const FLOAT_STORED = ['f16', 'f32', 'f64'] as const;

export type ArrowStored = (typeof FLOAT_STORED)[number];

export interface ArrowColumnLayout {
  /** 'Arrow IPC file' or 'Arrow IPC stream', for messages */
  what: string;
  /** the embedding column's name and place among the schema's fields */
  column: string;
  columnIndex: number;
  list: 'FixedSizeList' | 'List' | 'LargeList';
  /** FixedSizeList: the dims, from the schema */
  stride?: number;
  /** the values' type in the file */
  stored: ArrowStored;
  /** what readers deliver */
  dtype: DatasetDType;
  convert?: DatasetConversion;
  rows: number;
  /** the record batches that hold rows; batch b holds rows [batchStarts[b], batchStarts[b+1]) */
  batches: MessageBlock[];
  batchStarts: number[];
  /** the schema message's bytes, decoded again with every batch */
  schema: Uint8Array;
  /** dictionary batches (of other columns: the embedding column is never dictionary-encoded), decoded with the batches after them */
  dictionaries: { offset: number; bytes: Uint8Array }[];
  /** the codecs that record or dictionary batches are compressed with (none: the file is uncompressed) */
  codecs: ArrowCodec[];
}

/**
 * Indexes the Arrow IPC file or stream of `size` bytes and checks the embedding column: `column` names it, else the
 * file's only column. Throws DatasetFormatError naming the problem (not Arrow IPC, truncated, an unknown compression,
 * no such column, not a list of floats, no rows).
 */
export async function arrowColumnLayout(
  readAt: ReadAt,
  size: number,
  opts: { column?: string; convert?: DatasetConversion; dims?: number } = {},
): Promise<ArrowColumnLayout> {
  if (size === 0) throw new DatasetFormatError('Arrow IPC file is empty (0 bytes)');
  const start = await readExactly(readAt, 0, Math.min(size, MESSAGE_PROBE_BYTES), size, 'Arrow IPC file');
  const isFile = Buffer.from(start.buffer, start.byteOffset, Math.min(start.length, MAGIC.length)).toString('latin1') === MAGIC;
  const what = isFile ? 'Arrow IPC file' : 'Arrow IPC stream';
  if (!isFile) checkStreamStart(start);

  const messages = isFile ? await fileMessages(readAt, size) : await streamMessages(readAt, size, start);
  const schema = await decodeSchema(messages.schema);
  if (schema.endianness === 1) {
    throw new DatasetFormatError(`${what} is big-endian; kmfleet reads little-endian Arrow data (what writers produce on x86 and ARM)`);
  }
  const { field, columnIndex } = pickColumn(schema.fields, opts.column, what);
  const column = field.name;
  const { list, stride, stored } = embeddingType(field);
  if (stored === 'f64' && opts.convert !== 'f64-to-f32') {
    throw new DatasetFormatError(
      `Arrow column "${column}" holds float64 values; kmfleet reads float32 or float16. Convert with dataset.convert 'f64-to-f32' (kmfleet fit --convert f64-to-f32), or write the column as float32`,
    );
  }
  if (stride === 0) throw new DatasetFormatError(`Arrow column "${column}" is a FixedSizeList of 0 values (no dims)`);
  if (stride !== undefined && !(Number.isSafeInteger(stride) && stride > 0)) {
    throw new DatasetFormatError(`Arrow column "${column}" is a FixedSizeList of ${stride} values (a damaged schema?)`);
  }
  if (stride !== undefined && opts.dims !== undefined && opts.dims !== stride) {
    throw new DatasetFormatError(`Arrow column "${column}" has ${stride} dims, not the ${opts.dims} given`);
  }

  const codecs = new Set<ArrowCodec>();
  const batches: MessageBlock[] = [];
  const batchStarts = [0];
  messages.dictionaryCompressions.forEach((compression, d) => {
    if (compression) codecs.add(knownCodec(compression, `${what} dictionary batch ${d}`));
  });
  messages.batches.forEach(({ block, head }, b) => {
    if (head.compression) codecs.add(knownCodec(head.compression, `${what} record batch ${b}`));
    if (head.rows === 0) return;
    batches.push(block);
    batchStarts.push(batchStarts[batchStarts.length - 1] + (head.rows ?? 0));
  });
  const rows = batchStarts[batchStarts.length - 1];
  if (rows === 0) throw new DatasetFormatError(`Arrow column "${column}" has no rows`);
  return {
    what, column, columnIndex, list, ...(stride !== undefined ? { stride } : {}), stored,
    dtype: stored === 'f16' ? 'f16' : 'f32', ...(stored === 'f64' ? { convert: opts.convert } : {}),
    rows, batches, batchStarts, schema: messages.schema, dictionaries: messages.dictionaries, codecs: [...codecs],
  };
}

/** The codec of a compressed batch, or a DatasetFormatError naming the batch where Arrow defines no such compression. */
function knownCodec(compression: BodyCompression, label: string): ArrowCodec {
  if (!(ARROW_CODECS as readonly string[]).includes(compression.codec)) {
    throw new DatasetFormatError(`${label} is compressed with an unknown ${compression.codec} (Arrow defines LZ4_FRAME and ZSTD; a newer writer, or a damaged file?)`);
  }
  if (compression.method !== COMPRESSION_METHOD_BUFFER) {
    throw new DatasetFormatError(`${label} is compressed by an unknown method ${compression.method} (Arrow defines BUFFER, one buffer at a time)`);
  }
  return compression.codec as ArrowCodec;
}

interface IndexedMessages {
  schema: Uint8Array;
  batches: { block: MessageBlock; head: MessageHead }[];
  dictionaries: { offset: number; bytes: Uint8Array }[];
  /** each dictionary batch's compression, if any */
  dictionaryCompressions: (BodyCompression | undefined)[];
}

/** A Feather v1 file (before Arrow IPC) has magic of its own: say so rather than "not Arrow". */
function checkStreamStart(start: Uint8Array): void {
  if (Buffer.from(start.buffer, start.byteOffset, Math.min(start.length, 4)).toString('latin1') === 'FEA1') {
    throw new DatasetFormatError('this is a Feather v1 file, an older format than Arrow IPC: rewrite it as Feather v2 (pyarrow.feather.write_feather(df, path, version=2))');
  }
}

const notArrow = () => new DatasetFormatError('not an Arrow IPC file or stream: it starts with neither "ARROW1" nor a schema message (another format?)');

/** The file format: the footer gives the record batches' places; their heads are read for their row counts. */
async function fileMessages(readAt: ReadAt, size: number): Promise<IndexedMessages> {
  const what = 'Arrow IPC file';
  if (size < FILE_HEAD_BYTES + FILE_TAIL_BYTES) throw new DatasetFormatError(`${what} of ${size} bytes is too short for an Arrow IPC file`);
  const tail = Buffer.from(await readExactly(readAt, size - FILE_TAIL_BYTES, FILE_TAIL_BYTES, size, what));
  if (tail.toString('latin1', 4) !== MAGIC) {
    throw new DatasetFormatError(`${what} does not end with "${MAGIC}" (truncated? or an IPC stream named .arrow: name it .arrows)`);
  }
  const footerLength = tail.readInt32LE(0);
  if (footerLength <= 0 || footerLength > size - FILE_HEAD_BYTES - FILE_TAIL_BYTES) {
    throw new DatasetFormatError(`${what}'s footer length ${footerLength} does not fit in its ${size} bytes (a damaged file?)`);
  }
  const footer = await readExactly(readAt, size - FILE_TAIL_BYTES - footerLength, footerLength, size, what);
  const blocks = parseFooterBlocks(footer);
  const schema = await readMessage(readAt, FILE_HEAD_BYTES, size, `${what}'s schema`);
  if (schema.head === null || schema.head.type !== MESSAGE_SCHEMA) throw new DatasetFormatError(`${what} has no schema message after its magic`);

  const batches: IndexedMessages['batches'] = new Array(blocks.recordBatches.length);
  let next = 0;
  const lane = async () => {
    while (next < blocks.recordBatches.length) {
      const b = next++;
      const block = blocks.recordBatches[b];
      const label = `${what} record batch ${b}`;
      if (block.offset < FILE_HEAD_BYTES || block.headLength <= 0 || block.offset + block.headLength > size) {
        throw new DatasetFormatError(`${label} lies outside the file's ${size} bytes (truncated?)`);
      }
      const head = parseMessageHead(await readExactly(readAt, block.offset, block.headLength, size, what), label);
      if (head === null || 'needed' in head || head.type !== MESSAGE_RECORD_BATCH) {
        throw new DatasetFormatError(`${label}: the footer points at no record batch (a damaged file?)`);
      }
      const length = head.headLength + head.bodyLength;
      if (block.offset + length > size) throw new DatasetFormatError(`${label} ends past the file's end (truncated?)`);
      batches[b] = { block: { offset: block.offset, length }, head };
    }
  };
  await Promise.all(Array.from({ length: Math.min(HEAD_READS_IN_FLIGHT, blocks.recordBatches.length) }, lane));

  const dictionaries: IndexedMessages['dictionaries'] = [];
  const dictionaryCompressions: IndexedMessages['dictionaryCompressions'] = [];
  for (const d of blocks.dictionaries) {
    const m = await readMessage(readAt, d.offset, size, `${what} dictionary batch`);
    if (m.head === null || m.head.type !== MESSAGE_DICTIONARY_BATCH) throw new DatasetFormatError(`${what}: the footer points at no dictionary batch (a damaged file?)`);
    dictionaries.push({ offset: d.offset, bytes: await readExactly(readAt, d.offset, m.head.headLength + m.head.bodyLength, size, what) });
    dictionaryCompressions.push(m.head.compression);
  }
  return { schema: schema.bytes, batches, dictionaries, dictionaryCompressions };
}

/** The stream format has no index: each message's head is read in turn, and its body skipped. */
async function streamMessages(readAt: ReadAt, size: number, start: Uint8Array): Promise<IndexedMessages> {
  const what = 'Arrow IPC stream';
  // a stream starts with its schema message: anything else is another format
  const schema = await readMessage(readAt, 0, size, `${what}'s schema`, start).catch((err: unknown) => {
    throw err instanceof DatasetFormatError ? notArrow() : err;
  });
  if (schema.head === null || schema.head.type !== MESSAGE_SCHEMA) throw notArrow();
  const batches: IndexedMessages['batches'] = [];
  const dictionaries: IndexedMessages['dictionaries'] = [];
  const dictionaryCompressions: IndexedMessages['dictionaryCompressions'] = [];
  let offset = schema.bytes.length;
  // no end-of-stream marker is allowed: the stream then ends with the bytes
  while (offset < size) {
    const m = await readMessage(readAt, offset, size, `${what} message at byte ${offset}`);
    if (m.head === null) break;
    const length = m.head.headLength + m.head.bodyLength;
    if (offset + length > size) {
      throw new DatasetFormatError(`${what} ended early: the message at byte ${offset} needs ${length} bytes, the file has ${size - offset} left (truncated?)`);
    }
    if (m.head.type === MESSAGE_RECORD_BATCH) batches.push({ block: { offset, length }, head: m.head });
    else if (m.head.type === MESSAGE_DICTIONARY_BATCH) {
      dictionaries.push({ offset, bytes: await readExactly(readAt, offset, length, size, what) });
      dictionaryCompressions.push(m.head.compression);
    }
    offset += length;
  }
  return { schema: schema.bytes, batches, dictionaries, dictionaryCompressions };
}

/** A message's head (null at an end-of-stream marker) and its bytes: head and body for a schema, the head alone otherwise. */
async function readMessage(
  readAt: ReadAt,
  offset: number,
  size: number,
  what: string,
  probe?: Uint8Array,
): Promise<{ head: MessageHead | null; bytes: Uint8Array }> {
  let bytes = probe ?? (await readExactly(readAt, offset, Math.min(MESSAGE_PROBE_BYTES, size - offset), size, what));
  let head = parseMessageHead(bytes, what);
  if (head !== null && 'needed' in head) {
    if (offset + head.needed > size) throw new DatasetFormatError(`${what} ended early: its head needs ${head.needed} bytes, the file has ${size - offset} left (truncated?)`);
    bytes = await readExactly(readAt, offset, head.needed, size, what);
    head = parseMessageHead(bytes, what);
    if (head !== null && 'needed' in head) throw new DatasetFormatError(`${what} is damaged (its head does not parse)`);
  }
  if (head === null) return { head, bytes: bytes.subarray(0, 0) };
  if (head.type === MESSAGE_SCHEMA) {
    const length = head.headLength + head.bodyLength;
    if (offset + length > size) throw new DatasetFormatError(`${what} ended early (truncated?)`);
    if (bytes.length < length) bytes = await readExactly(readAt, offset, length, size, what);
    return { head, bytes: bytes.subarray(0, length) };
  }
  return { head, bytes: bytes.subarray(0, Math.min(bytes.length, head.headLength)) };
}

/** `length` bytes at `position`, or a DatasetFormatError when the file ends first. */
async function readExactly(readAt: ReadAt, position: number, length: number, size: number, what: string): Promise<Uint8Array> {
  // a damaged length is refused before anything is read (or allocated) for it
  if (!(Number.isSafeInteger(position) && Number.isSafeInteger(length) && position >= 0 && length >= 0 && position + length <= size)) {
    throw new DatasetFormatError(`${what} ended early: bytes [${position}, ${position + length}) of ${size} (truncated or damaged?)`);
  }
  const bytes = await readAt(position, length);
  if (bytes.length < length) throw new DatasetFormatError(`${what} ended early: bytes [${position}, ${position + length}) of ${size} (truncated?)`);
  return bytes.subarray(0, length);
}

async function decodeSchema(bytes: Uint8Array): Promise<Schema> {
  const { tableFromIPC } = await import('@uwdata/flechette');
  try {
    return tableFromIPC([bytes]).schema;
  } catch (err) {
    throw new DatasetFormatError(`Arrow IPC schema cannot be decoded: ${(err as Error).message}`);
  }
}

function pickColumn(fields: Field[], wanted: string | undefined, what: string): { field: Field; columnIndex: number } {
  const names = fields.map((f) => f.name);
  const list = names.length > 20 ? `${names.slice(0, 20).join(', ')}, … (${names.length} in all)` : names.join(', ');
  if (wanted !== undefined) {
    const columnIndex = names.indexOf(wanted);
    if (columnIndex < 0) throw new DatasetFormatError(`${what} has no column "${wanted}" (it has: ${list || 'none'})`);
    return { field: fields[columnIndex], columnIndex };
  }
  if (fields.length === 1) return { field: fields[0], columnIndex: 0 };
  throw new DatasetFormatError(
    `${what} has ${fields.length} columns: say which one holds the embeddings (dataset.column, kmfleet fit --column): ${list}`,
  );
}

/** The list and value types of an embedding column, or a DatasetFormatError saying what the column is instead. */
function embeddingType(field: Field): { list: ArrowColumnLayout['list']; stride?: number; stored: ArrowStored } {
  const { type } = field;
  const name = field.name;
  const list = type.typeId === TYPE_FIXED_SIZE_LIST ? 'FixedSizeList' : type.typeId === TYPE_LIST ? 'List' : type.typeId === TYPE_LARGE_LIST ? 'LargeList' : undefined;
  if (!list) {
    throw new DatasetFormatError(
      `Arrow column "${name}" is ${typeName(type)}, not a list of floats (a FixedSizeList or List of float32, float16 or float64: one embedding per row)`,
    );
  }
  const element = (type as { children: Field[] }).children[0].type;
  if (element.typeId !== TYPE_FLOAT) {
    throw new DatasetFormatError(`Arrow column "${name}" is a ${list} of ${typeName(element)}, not of float32, float16 or float64`);
  }
  const stored = FLOAT_STORED[(element as { precision: number }).precision];
  return { list, ...(list === 'FixedSizeList' ? { stride: (type as { stride: number }).stride } : {}), stored };
}

function typeName(type: Field['type']): string {
  const base = TYPE_NAMES[type.typeId] ?? `type ${type.typeId}`;
  if (type.typeId === 2) return `${(type as { signed: boolean }).signed ? 'Int' : 'UInt'}${(type as { bitWidth: number }).bitWidth}`;
  if (type.typeId === TYPE_FLOAT) return FLOAT_STORED[(type as { precision: number }).precision]?.replace('f', 'float') ?? base;
  if (type.typeId === TYPE_LIST || type.typeId === TYPE_LARGE_LIST || type.typeId === TYPE_FIXED_SIZE_LIST) {
    return `a ${base} of ${typeName((type as { children: Field[] }).children[0].type)}`;
  }
  return base;
}
