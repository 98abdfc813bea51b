/** Arrow IPC files and streams of embedding columns, written with @uwdata/flechette's own writer. */
import { compress as lz4Compress } from 'lz4js';
import {
  CompressionType, dictionary, fixedSizeList, float16, float32, float64, int32, largeList, list, setCompressionCodec, tableFromArrays, tableToIPC, utf8,
  type DataType,
} from '@uwdata/flechette';

export type ArrowElement = 'f32' | 'f16' | 'f64' | 'i32';
export type ArrowList = 'FixedSizeList' | 'List' | 'LargeList';

export interface ArrowColumn {
  name: string;
  /** one row (or null) per row */
  data: unknown[];
  /** an embedding column: its list and element types; else `scalar` says what the column is */
  list?: ArrowList;
  element?: ArrowElement;
  /** FixedSizeList: the list's size */
  dims?: number;
  scalar?: 'int32' | 'utf8' | 'dictionary';
}

const ELEMENT = { f32: float32, f16: float16, f64: float64, i32: int32 };

function typeOf(c: ArrowColumn): DataType {
  if (c.scalar === 'int32') return int32();
  if (c.scalar === 'utf8') return utf8();
  if (c.scalar === 'dictionary') return dictionary(utf8());
  const element = ELEMENT[c.element ?? 'f32']();
  if (c.list === 'FixedSizeList') return fixedSizeList(element, c.dims ?? 0);
  return c.list === 'LargeList' ? largeList(element) : list(element);
}

/**
 * How a file's buffers are compressed: the codec id its batches record, and the compressor. flechette stores a buffer
 * as it is (length prefix -1) where the compressor does not make it shorter.
 */
export interface ArrowCompression {
  id: number;
  encode: (bytes: Uint8Array) => Uint8Array;
}

/** LZ4 frames, written by lz4js (the frame format that pyarrow writes and reads) */
export const LZ4_FRAME: ArrowCompression = { id: CompressionType.LZ4_FRAME, encode: (b) => lz4Compress(b) };

/** `columns` as an Arrow IPC file or stream, `batchRows` rows a record batch, compressed with `compression` if given. */
export function encodeArrow(columns: ArrowColumn[], opts: { format: 'file' | 'stream'; batchRows: number; compression?: ArrowCompression }): Buffer {
  const table = tableFromArrays(
    columns.map((c) => [c.name, c.data] as [string, unknown[]]),
    { types: Object.fromEntries(columns.map((c) => [c.name, typeOf(c)])), maxBatchRows: opts.batchRows },
  );
  const { compression } = opts;
  if (compression) {
    // flechette's codec registry is one per process; the reader under test sets its own decoders before it decodes
    setCompressionCodec(compression.id as typeof CompressionType.LZ4_FRAME, {
      encode: compression.encode,
      decode: () => {
        throw new Error('the test helper only writes');
      },
    });
  }
  const bytes = tableToIPC(table, { format: opts.format, ...(compression ? { codec: compression.id as typeof CompressionType.LZ4_FRAME } : {}) });
  if (!bytes) throw new Error('flechette wrote nothing');
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** rows of `dims` values from a flat array */
export function rowsOf(values: ArrayLike<number>, dims: number): number[][] {
  const out: number[][] = [];
  for (let r = 0; r < values.length / dims; r++) out.push(Array.from({ length: dims }, (_, j) => values[r * dims + j]));
  return out;
}
