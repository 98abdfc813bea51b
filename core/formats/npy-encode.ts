/**
 * Small .npy arrays in memory: encode (header + data in one Buffer) and decode (for centroid files and tests).
 * Datasets never go through here: they are streamed (NpyWriter, RowSource).
 */
import { endianness } from 'node:os';
import { DatasetFormatError } from './errors.js';
import { decodeF16 } from './half.js';
import { NPY_MAGIC, parseNpyArrayHeader, shapeText } from './npy-header.js';

if (endianness() !== 'LE') throw new Error('kmfleet reads and writes little-endian .npy data and needs a little-endian host');

/** The element types kmfleet writes or reads in memory. */
export type NpyDescr = '<f4' | '<f2' | '<f8' | '<i4' | '<i8';
export type NpyTypedArray = Float32Array | Float64Array | Int32Array | BigInt64Array;

export const NPY_ITEM_SIZE: Record<NpyDescr, number> = { '<f4': 4, '<f2': 2, '<f8': 8, '<i4': 4, '<i8': 8 };

/** The header bytes (version 1.0 when the dict fits a u16 length, else 2.0), padded so the data starts 64-aligned. */
export function encodeNpyHeader(descr: NpyDescr, shape: readonly number[]): Buffer {
  for (const n of shape) {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`invalid .npy dimension ${n}`);
  }
  const dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeText(shape)}, }`;
  let prefix = 10;
  let total = Math.ceil((prefix + dict.length + 1) / 64) * 64;
  if (total - prefix > 0xffff) {
    prefix = 12;
    total = Math.ceil((prefix + dict.length + 1) / 64) * 64;
  }
  const out = Buffer.alloc(total, 0x20);
  NPY_MAGIC.copy(out, 0);
  out[6] = prefix === 10 ? 1 : 2;
  out[7] = 0;
  if (prefix === 10) out.writeUInt16LE(total - prefix, 8);
  else out.writeUInt32LE(total - prefix, 8);
  out.write(dict, prefix, 'latin1');
  out[total - 1] = 0x0a;
  return out;
}

export function typedArrayBytes(a: ArrayBufferView): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

/** A whole .npy file in memory. `array`'s element type must match `descr` (default: inferred from the array). */
export function encodeNpy(array: NpyTypedArray, shape: readonly number[], descr?: NpyDescr): Buffer {
  const d = descr ?? inferDescr(array);
  const count = shape.reduce((a, b) => a * b, 1);
  if (count * NPY_ITEM_SIZE[d] !== array.byteLength) {
    throw new RangeError(`encodeNpy: shape ${shapeText(shape)} of ${d} does not match an array of ${array.byteLength} bytes`);
  }
  return Buffer.concat([encodeNpyHeader(d, shape), typedArrayBytes(array)]);
}

function inferDescr(a: NpyTypedArray): NpyDescr {
  if (a instanceof Float32Array) return '<f4';
  if (a instanceof Float64Array) return '<f8';
  if (a instanceof Int32Array) return '<i4';
  return '<i8';
}

export interface DecodedNpy {
  descr: NpyDescr;
  shape: number[];
  /** f2 data is widened to Float32Array */
  data: NpyTypedArray;
}

/** Decode a whole small .npy file held in memory (C order, little-endian, one of the NpyDescr types). */
export function decodeNpy(buf: Uint8Array): DecodedNpy {
  const h = parseNpyArrayHeader(buf, buf.length);
  if (!(h.descr in NPY_ITEM_SIZE)) {
    throw new DatasetFormatError(`dtype '${h.descr}' is not supported here; expected one of ${Object.keys(NPY_ITEM_SIZE).join(', ')}`);
  }
  if (h.fortranOrder) throw new DatasetFormatError('Fortran-order .npy arrays are not supported; save a C-order array');
  const descr = h.descr as NpyDescr;
  const item = NPY_ITEM_SIZE[descr];
  const count = h.shape.reduce((a, b) => a * b, 1n);
  const have = BigInt(buf.length - h.dataOffset);
  if (count * BigInt(item) !== have) {
    throw new DatasetFormatError(
      `.npy shape ${shapeText(h.shape)} of ${descr} needs ${count * BigInt(item)} bytes of data but the file has ${have}`,
    );
  }
  const n = Number(count);
  const bytes = buf.slice(h.dataOffset); // a copy: aligned, and independent of the caller's buffer
  const ab = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  let data: NpyTypedArray;
  switch (descr) {
    case '<f4': data = new Float32Array(ab, 0, n); break;
    case '<f8': data = new Float64Array(ab, 0, n); break;
    case '<i4': data = new Int32Array(ab, 0, n); break;
    case '<i8': data = new BigInt64Array(ab, 0, n); break;
    case '<f2': data = new Float32Array(n); decodeF16(bytes, 0, n, data); break;
  }
  return { descr, shape: h.shape.map(Number), data };
}
