/**
 * The page headers of a Parquet column chunk, checked before hyparquet decodes its pages. hyparquet sizes its arrays
 * and buffers by what a page header says (a data page's value count, a page's uncompressed size), so a damaged or
 * hostile header would make it allocate gigabytes for a page of a few bytes. Here every page must lie inside its
 * chunk, its values (all pages together) be no more than the row group's rows can hold (rows × values a row), and its
 * uncompressed size be its own size without compression, or at most MAX_COMPRESSION_RATIO times it with.
 *
 * The chunk's bytes read here are returned, so that the decode that follows takes them instead of reading them again.
 */
import type { ColumnMetaData, FileMetaData, PageHeader } from 'hyparquet';
import { DatasetFormatError } from './errors.js';
import type { ParquetFile } from './parquet.js';

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
  const { parquetHeader } = await import('hyparquet/src/column.js'); // lazily, as formats/parquet.ts loads hyparquet
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
    reader.offset += size;
  }
  return { start, bytes };
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
