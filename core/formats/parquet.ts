/**
 * Parquet datasets: one column whose every row is an embedding, a list of float32, float16 or (with convert
 * 'f64-to-f32') float64 values — what pandas, pyarrow and Spark write for a vector column (list<float> or
 * fixed_size_list<float, D>, both stored as Parquet's LIST). This module reads the footer (hyparquet) and checks the
 * column's schema; rows are decoded by row group in dataset/parquet-rows.ts.
 *
 * hyparquet is imported lazily, so processes that never open a Parquet file never load it.
 */
import type { FileMetaData, SchemaTree } from 'hyparquet';
import { DatasetFormatError } from './errors.js';
import type { DatasetConversion, DatasetDType } from './npy-header.js';

/** Reads `length` bytes at `position` (fewer only past the end of the file). */
export type ParquetReadAt = (position: number, length: number) => Promise<Uint8Array>;

/** hyparquet's view of a file: its size and ranged reads. */
export interface ParquetFile {
  byteLength: number;
  slice(start: number, end?: number): Promise<ArrayBuffer>;
}

export interface ParquetColumnLayout {
  /** the embedding column's name */
  column: string;
  /** what readers deliver */
  dtype: DatasetDType;
  /** the values' type in the file: FLOAT, DOUBLE or FLOAT16 */
  stored: 'FLOAT' | 'DOUBLE' | 'FLOAT16';
  convert?: DatasetConversion;
  rows: number;
  /** the first row of each row group, and the row count after the last: group g holds rows [groupStarts[g], groupStarts[g+1]) */
  groupStarts: number[];
  metadata: FileMetaData;
}

/** the magic bytes at both ends of a Parquet file, and the footer's length field before the last */
const MAGIC = 'PAR1';
const TAIL_BYTES = 8;

export function parquetFile(readAt: ParquetReadAt, size: number): ParquetFile {
  return {
    byteLength: size,
    slice: async (start, end = size) => {
      const bytes = await readAt(start, end - start);
      if (bytes.length !== end - start) throw new DatasetFormatError(`Parquet file ended early: bytes [${start}, ${end}) of ${size} (truncated?)`);
      return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength
        ? (bytes.buffer as ArrayBuffer)
        : (bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer);
    },
  };
}

/**
 * Reads the footer of the Parquet `file` and checks the embedding column: `column` names it, else the file's only
 * column. Throws DatasetFormatError naming the problem (not Parquet, no such column, not a list of floats, no rows).
 */
export async function parquetColumnLayout(
  file: ParquetFile,
  opts: { column?: string; convert?: DatasetConversion } = {},
): Promise<ParquetColumnLayout> {
  if (file.byteLength < 2 * MAGIC.length + 4) throw new DatasetFormatError(`Parquet file of ${file.byteLength} bytes is too short for a Parquet file`);
  const tail = Buffer.from(await file.slice(file.byteLength - TAIL_BYTES));
  if (tail.toString('latin1', 4) !== MAGIC) {
    throw new DatasetFormatError('not a Parquet file: it does not end with "PAR1" (truncated, or another format?)');
  }
  const { parquetMetadataAsync, parquetSchema } = await import('hyparquet');
  let metadata: FileMetaData;
  // a failed read (S3, the file) is passed on as it is; only what hyparquet says of the bytes is a format error
  let readError: unknown;
  const reading: ParquetFile = {
    byteLength: file.byteLength,
    slice: (s, e) => file.slice(s, e).catch((err: unknown) => {
      readError ??= err;
      throw err;
    }),
  };
  try {
    metadata = await parquetMetadataAsync(reading);
  } catch (err) {
    if (readError !== undefined) throw readError;
    if (err instanceof DatasetFormatError) throw err;
    throw new DatasetFormatError(`Parquet footer cannot be read: ${(err as Error).message}`);
  }
  let tree: SchemaTree;
  try {
    tree = parquetSchema(metadata);
  } catch (err) {
    throw new DatasetFormatError(`Parquet footer's schema is damaged: ${(err as Error).message}`);
  }
  const names = tree.children.map((c) => c.element.name);
  const list = names.length > 20 ? `${names.slice(0, 20).join(', ')}, … (${names.length} in all)` : names.join(', ');
  let node: SchemaTree | undefined;
  if (opts.column !== undefined) {
    node = tree.children.find((c) => c.element.name === opts.column);
    if (!node) throw new DatasetFormatError(`Parquet file has no column "${opts.column}" (it has: ${list || 'none'})`);
  } else if (tree.children.length === 1) {
    node = tree.children[0];
  } else {
    throw new DatasetFormatError(
      `Parquet file has ${tree.children.length} columns: say which one holds the embeddings (dataset.column, kmfleet fit --column): ${list}`,
    );
  }
  const column = node.element.name;
  const leaf = listElement(node);
  const stored = leafType(leaf);
  if (!stored) {
    throw new DatasetFormatError(`Parquet column "${column}" is a list of ${typeName(leaf)}, not of float, float16 or double`);
  }
  if (stored === 'DOUBLE' && opts.convert !== 'f64-to-f32') {
    throw new DatasetFormatError(
      `Parquet column "${column}" holds float64 values; kmfleet reads float32 or float16. Convert with dataset.convert 'f64-to-f32' (kmfleet fit --convert f64-to-f32), or write the column as float32`,
    );
  }
  const groupStarts = [0];
  for (const g of metadata.row_groups) groupStarts.push(groupStarts[groupStarts.length - 1] + Number(g.num_rows));
  const rows = groupStarts[groupStarts.length - 1];
  if (rows !== Number(metadata.num_rows)) {
    throw new DatasetFormatError(`Parquet footer says ${metadata.num_rows} rows but its row groups hold ${rows} (a damaged file?)`);
  }
  if (rows === 0) throw new DatasetFormatError(`Parquet column "${column}" has no rows`);
  return {
    column,
    dtype: stored === 'FLOAT16' ? 'f16' : 'f32',
    stored,
    ...(stored === 'DOUBLE' ? { convert: opts.convert } : {}),
    rows,
    groupStarts,
    metadata,
  };
}

/**
 * The leaf of a list column: the 3-level LIST (group → repeated group → element) that every current writer uses,
 * fixed_size_list included, or the legacy 2-level form (group → repeated leaf). Anything else is not one embedding
 * per row.
 */
function listElement(node: SchemaTree): SchemaTree {
  const name = node.element.name;
  if (node.children.length === 0) {
    throw new DatasetFormatError(
      `Parquet column "${name}" is a scalar column of ${typeName(node)}, not a list of floats (one embedding per row)`,
    );
  }
  const repeated = node.children.length === 1 ? node.children[0] : undefined;
  if (!repeated || repeated.element.repetition_type !== 'REPEATED') {
    throw new DatasetFormatError(`Parquet column "${name}" is a struct, not a list of floats (one embedding per row)`);
  }
  const leaf = repeated.children.length === 0 ? repeated : repeated.children.length === 1 ? repeated.children[0] : undefined;
  if (!leaf || leaf.children.length > 0) {
    throw new DatasetFormatError(`Parquet column "${name}" is a nested list or a list of structs, not a list of floats (one embedding per row)`);
  }
  return leaf;
}

function leafType(leaf: SchemaTree): ParquetColumnLayout['stored'] | undefined {
  const e = leaf.element;
  if (e.type === 'FLOAT' || e.type === 'DOUBLE') return e.type;
  if (e.type === 'FIXED_LEN_BYTE_ARRAY' && e.logical_type?.type === 'FLOAT16') return 'FLOAT16';
  return undefined;
}

function typeName(node: SchemaTree): string {
  const e = node.element;
  const annotation = e.logical_type?.type ?? e.converted_type;
  return annotation ? `${e.type ?? 'group'} (${annotation})` : (e.type ?? 'group');
}
