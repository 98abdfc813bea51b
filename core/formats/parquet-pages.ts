/**
 * The page headers of a Parquet column chunk, checked before hyparquet decodes its pages. hyparquet sizes its arrays
 * and buffers by what a page header says (a data page's value count, a page's uncompressed size), so a damaged or
 * hostile header would make it allocate gigabytes for a page of a few bytes. Here every page must lie inside its
 * chunk, its values (all pages together) be no more than the row group's rows can hold (rows × values a row), and its
 * uncompressed size be its own size without compression, or at most MAX_COMPRESSION_RATIO times it with. Inside a
 * data page, hyparquet repeats a value as often as a run of its levels or dictionary indices says, past the page's
 * value count: every run of those streams (the RLE / bit-packed hybrid) must stay within the page's values.
 *
 * The chunk's bytes read here are returned, so that the decode that follows takes them instead of reading them again.
 */
import type { ColumnMetaData, FileMetaData, PageHeader } from 'hyparquet';
import { DatasetFormatError } from './errors.js';
import type { ParquetFile } from './parquet.js';
import { checkedSnappy } from './snappy-pages.js';

/** A column chunk's bytes: [start, start + bytes.byteLength) of the file. */
export interface ChunkBytes {
  start: number;
  bytes: ArrayBuffer;
}

/** values a row may hold while the dims are not known yet (the first row group is decoded to learn them) */
export const MAX_PROBE_VALUES_PER_ROW = 65536;
/** the most a compressed page may grow (a page of floats compresses far less; only degenerate data more) */
const MAX_COMPRESSION_RATIO = 1024;
const MIN_PAGE_ALLOWANCE = 64 * 1024;

/**
 * Checks the pages of row group `g`'s chunk of `column` and returns its bytes. `valuesPerRow` bounds the values a
 * row holds (the dims once known, else the largest dims a dataset may have); `valueBytes` is a value's size.
 */
export async function checkColumnPages(
  file: ParquetFile,
  metadata: FileMetaData,
  column: string,
  g: number,
  bounds: { rows: number; valuesPerRow: number; valueBytes: number },
  label: string,
): Promise<ChunkBytes> {
  const chunk = metadata.row_groups[g]?.columns.find((c) => c.meta_data?.path_in_schema[0] === column);
  const meta: ColumnMetaData | undefined = chunk?.meta_data;
  if (!meta) throw new DatasetFormatError(`${label} has no metadata for the column`);
  const start = Number(meta.dictionary_page_offset || meta.data_page_offset);
  const length = Number(meta.total_compressed_size);
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(length) || start < 4 || length <= 0 || start + length > file.byteLength) {
    throw new DatasetFormatError(`${label} lies at bytes [${start}, ${start + length}), outside the file's ${file.byteLength} (a damaged footer?)`);
  }
  // lazily, as formats/parquet.ts loads hyparquet
  const [{ parquetHeader }, { decompressPage }, { parquetSchema, snappyUncompress }, schema] = await Promise.all([
    import('hyparquet/src/column.js'), import('hyparquet/src/datapage.js'), import('hyparquet'), import('hyparquet/src/schema.js'),
  ]);
  let path: ReturnType<typeof schema.getTreePath>;
  try {
    path = schema.getTreePath(parquetSchema(metadata), meta.path_in_schema);
  } catch (err) {
    throw new DatasetFormatError(`${label}: its column path ${JSON.stringify(meta.path_in_schema)} is not in the schema (${(err as Error).message})`);
  }
  const levels = { nested: path.length > 1, repetition: bitWidth(schema.getMaxRepetitionLevel(path)), definition: bitWidth(schema.getMaxDefinitionLevel(path)) };
  const compressors = { SNAPPY: checkedSnappy(snappyUncompress) };
  const bytes = await file.slice(start, start + length);
  const maxValues = bounds.rows * bounds.valuesPerRow;
  const compressed = meta.codec !== 'UNCOMPRESSED';
  const reader = { view: new DataView(bytes), offset: 0 };
  let values = 0;
  while (reader.offset < length) {
    const at = start + reader.offset;
    let header: PageHeader;
    try {
      header = parquetHeader(reader);
    } catch (err) {
      throw new DatasetFormatError(`${label}: the page header at byte ${at} cannot be read (${(err as Error).message})`);
    }
    const size = header.compressed_page_size;
    const unpacked = header.uncompressed_page_size;
    const bad = (what: string) => new DatasetFormatError(`${label}: the page at byte ${at} ${what} (a damaged file?)`);
    if (!Number.isSafeInteger(size) || size < 0 || reader.offset + size > length) throw bad(`has ${size} bytes, past its column chunk`);
    const maxUnpacked = compressed ? Math.max(size * MAX_COMPRESSION_RATIO, MIN_PAGE_ALLOWANCE) : size;
    if (!Number.isSafeInteger(unpacked) || unpacked < 0 || unpacked > maxUnpacked) {
      throw bad(`claims ${unpacked} bytes uncompressed from ${size}${compressed ? ` (more than ${MAX_COMPRESSION_RATIO}×)` : ' without compression'}`);
    }
    const missing = missingFields(header);
    if (missing) throw bad(`has no ${missing} (a field every such page has)`);
    const v2 = header.data_page_header_v2;
    if (v2 && v2.definition_levels_byte_length + v2.repetition_levels_byte_length > size) {
      throw bad(`has ${v2.definition_levels_byte_length + v2.repetition_levels_byte_length} bytes of levels in ${size}`);
    }
    const dataValues = header.data_page_header?.num_values ?? v2?.num_values;
    if (dataValues !== undefined) {
      values += dataValues;
      if (!Number.isSafeInteger(dataValues) || dataValues < 0 || values > maxValues) {
        throw bad(`brings the chunk to ${values} values, more than its ${bounds.rows} rows can hold`);
      }
    }
    const dictionaryValues = header.dictionary_page_header?.num_values;
    if (dictionaryValues !== undefined && (!Number.isSafeInteger(dictionaryValues) || dictionaryValues < 0 || dictionaryValues * bounds.valueBytes > unpacked)) {
      throw bad(`is a dictionary of ${dictionaryValues} values in ${unpacked} bytes`);
    }
    if (header.type === 'DATA_PAGE' || header.type === 'DATA_PAGE_V2') {
      const page = new Uint8Array(bytes, reader.offset, size);
      try {
        checkRuns(page, header, levels, (data, unpackedSize) => decompressPage(data, unpackedSize, meta.codec, compressors));
      } catch (err) {
        throw err instanceof DatasetFormatError ? bad(err.message) : bad(`cannot be read (${(err as Error).message})`);
      }
    }
    reader.offset += size;
  }
  return { start, bytes };
}

const bitWidth = (maxLevel: number) => (maxLevel > 0 ? 32 - Math.clz32(maxLevel) : 0);

/** A bounds-checked reader over one page's bytes. */
class PageReader {
  offset = 0;
  private readonly view: DataView;

  constructor(readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private need(n: number): void {
    if (this.offset + n > this.bytes.length) throw new DatasetFormatError(`has a run that reads past its ${this.bytes.length} bytes`);
  }

  u8(): number {
    this.need(1);
    return this.view.getUint8(this.offset++);
  }

  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.offset, true);
    this.offset += 4;
    return v;
  }

  /** hyparquet's varint: the same int32 (a sign bit included) */
  varint(): number {
    let result = 0;
    for (let shift = 0; ; shift += 7) {
      const byte = this.u8();
      result |= (byte & 0x7f) << shift;
      if (!(byte & 0x80)) return result;
      if (shift > 28) throw new DatasetFormatError('has a run header longer than 5 bytes');
    }
  }
}

/**
 * One RLE / bit-packed hybrid stream as hyparquet reads it into `expected` values (after a 4-byte length when `length`
 * is not given), each run within the values left; the reader then stands after the stream.
 */
function scanHybrid(r: PageReader, width: number, expected: number, length?: number): void {
  if (length === undefined) length = r.u32();
  const start = r.offset;
  let seen = 0;
  while (seen < expected) {
    const header = r.varint();
    if (header & 1) {
      const values = (header >> 1) << 3;
      if (values < 0 || values > expected - seen + 7) throw new DatasetFormatError(`has a bit-packed run of ${values} values where ${expected - seen} are left`);
      if (values === 0) continue;
      r.offset += (values / 8) * width;
      seen += values;
    } else {
      const count = header >>> 1;
      if (count > expected - seen) throw new DatasetFormatError(`has a run of ${count} values where ${expected - seen} are left`);
      r.offset += (width + 7) >> 3;
      seen += count;
    }
    if (r.offset > r.bytes.length) throw new DatasetFormatError(`has a run that reads past its ${r.bytes.length} bytes`);
  }
  r.offset = start + length;
}

const DICTIONARY_ENCODINGS = new Set(['PLAIN_DICTIONARY', 'RLE_DICTIONARY']);

/** The hybrid streams of a data page (its levels; its values when they are dictionary indices), as hyparquet reads them. */
function checkRuns(
  raw: Uint8Array,
  h: PageHeader,
  levels: { nested: boolean; repetition: number; definition: number },
  decompress: (data: Uint8Array, unpackedSize: number) => Uint8Array,
): void {
  if (h.data_page_header) {
    const n = h.data_page_header.num_values;
    const r = new PageReader(decompress(raw, h.uncompressed_page_size));
    if (levels.nested && levels.repetition) scanHybrid(r, levels.repetition, n);
    if (levels.definition) scanHybrid(r, levels.definition, n);
    if (DICTIONARY_ENCODINGS.has(h.data_page_header.encoding)) {
      const width = r.u8();
      if (width) scanHybrid(r, width, n, r.bytes.length - r.offset);
    }
    return;
  }
  const v2 = h.data_page_header_v2!;
  const n = v2.num_values;
  const levelBytes = v2.repetition_levels_byte_length + v2.definition_levels_byte_length;
  const r = new PageReader(raw);
  if (levels.repetition) scanHybrid(r, levels.repetition, n, v2.repetition_levels_byte_length);
  r.offset = v2.repetition_levels_byte_length;
  if (levels.definition) scanHybrid(r, levels.definition, n, v2.definition_levels_byte_length);
  if (!DICTIONARY_ENCODINGS.has(v2.encoding)) return;
  const unpacked = h.uncompressed_page_size - levelBytes;
  const values = v2.is_compressed !== false && unpacked ? decompress(raw.subarray(levelBytes), unpacked) : raw.subarray(levelBytes);
  const vr = new PageReader(values);
  const width = vr.u8();
  if (width) scanHybrid(vr, width, n, unpacked - 1);
}

const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

/** The first field the Parquet spec requires of this page's header that it lacks (or holds no count or known name). */
function missingFields(h: PageHeader): string | undefined {
  if (h.type === undefined) return 'page type';
  if (!isCount(h.compressed_page_size)) return 'compressed size';
  if (!isCount(h.uncompressed_page_size)) return 'uncompressed size';
  const v1 = h.data_page_header, v2 = h.data_page_header_v2, dict = h.dictionary_page_header;
  if (h.type === 'DATA_PAGE') {
    if (!v1 || !isCount(v1.num_values)) return 'value count';
    if (!v1.encoding || !v1.definition_level_encoding || !v1.repetition_level_encoding) return 'encodings';
  } else if (h.type === 'DATA_PAGE_V2') {
    if (!v2 || !isCount(v2.num_values) || !isCount(v2.num_nulls) || !isCount(v2.num_rows)) return 'value, null and row counts';
    if (!v2.encoding) return 'encoding';
    if (!isCount(v2.definition_levels_byte_length) || !isCount(v2.repetition_levels_byte_length)) return 'level lengths';
    if (v2.num_nulls > v2.num_values) return 'consistent null count';
  } else if (h.type === 'DICTIONARY_PAGE') {
    if (!dict || !isCount(dict.num_values) || !dict.encoding) return 'dictionary value count and encoding';
  }
  return undefined;
}
