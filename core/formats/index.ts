/** Dataset and output file formats: .npy (header parsing, streaming writer, small arrays), .npz, Parquet, Arrow IPC, fvecs/bvecs and raw f32/f16. */
export { DatasetFormatError } from './errors.js';
export { decodeF16, encodeF16, f16BitsToF32, f32ToF16Bits } from './half.js';
export { convertF64ToF32 } from './f64-to-f32.js';
export {
  NPY_HEADER_PROBE_BYTES,
  NPY_MAX_HEADER_BYTES,
  NPY_PREFIX_BYTES,
  npyHeaderLength,
  parseNpyArrayHeader,
  parseNpyHeader,
  type DatasetConversion,
  type DatasetDType,
  type DatasetLayout,
  type NpyArrayHeader,
} from './npy-header.js';
export { decodeNpy, encodeNpy, encodeNpyHeader, typedArrayBytes, type DecodedNpy, type NpyDescr, type NpyTypedArray } from './npy-encode.js';
export { fileSink, NpyWriter, type ByteSink, type NpyWriteResult } from './npy-writer.js';
export { rawLayout, type RawFormat } from './raw.js';
export { decodeRows, type DecodedRows, type RowDecoding } from './row-decoding.js';
export { VECS_HEADER_BYTES, vecsLayout, type VecsFormat } from './vecs.js';
export { parquetColumnLayout, parquetFile, type ParquetColumnLayout, type ParquetFile, type ParquetReadAt } from './parquet.js';
export { arrowColumnLayout, type ArrowColumnLayout } from './arrow-ipc.js';
export { npzLayout, ZIP_TAIL_PROBE_BYTES, type NpzMemberLayout, type ReadAt } from './npz.js';
