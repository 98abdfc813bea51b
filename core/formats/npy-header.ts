/**
 * The .npy header (format versions 1.0, 2.0 and 3.0, https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html).
 *
 *   \x93NUMPY  major minor  header_len (u16 LE in 1.0, u32 LE in 2.0/3.0)  python-dict literal, space padded, '\n'
 *
 * Parsing works on a small Buffer holding the first bytes of the file, so that an S3 reader can do one HEAD and one
 * ranged GET (npyHeaderLength tells how many bytes that GET needs) and call the same parser as the local reader.
 * Nothing here allocates sized by numbers read from the file: header lengths are capped and shapes are checked
 * against the real file size with BigInt arithmetic before anyone trusts them.
 */
import { DatasetFormatError } from './errors.js';
import type { RowDecoding } from './row-decoding.js';

export const NPY_MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // \x93NUMPY
/** bytes of magic + version + the longest header-length field */
export const NPY_PREFIX_BYTES = 12;
/** headers longer than this are refused (numpy's own reader refuses over 10 000 bytes by default) */
export const NPY_MAX_HEADER_BYTES = 65536;
/** what a remote reader should fetch first: enough for every header a real writer produces */
export const NPY_HEADER_PROBE_BYTES = 4096;

export type DatasetDType = 'f32' | 'f16';
/** Opt-in conversions of stored data to a DatasetDType as it is read (the spec's dataset.convert). */
export type DatasetConversion = 'f64-to-f32';

/** Where the rows of a dataset file are and what they look like. */
export interface DatasetLayout {
  /** what readers deliver (after any conversion) */
  dtype: DatasetDType;
  rows: number;
  dims: number;
  /** byte offset of row 0 */
  dataOffset: number;
  fortranOrder: false;
  itemSize: number;
  /** dims × itemSize: a delivered row */
  rowBytes: number;
  /** a row as stored in the file: rowBytes, dims × 8 for a float64 file read with convert 'f64-to-f32', a whole record for fvecs/bvecs */
  storedRowBytes: number;
  /** set when the user asked for the stored rows to be converted as they are read */
  convert?: DatasetConversion;
  /** set when stored rows differ from delivered rows: readers decode them (row-decoding.ts) */
  decoding?: RowDecoding;
}

/** A parsed header of any array, before the dataset rules apply. */
export interface NpyArrayHeader {
  version: string;
  descr: string;
  fortranOrder: boolean;
  shape: bigint[];
  /** bytes before the data: magic, version, length field and the dict */
  dataOffset: number;
}

/**
 * Total header size (data offset) announced by the first bytes of a .npy file, or null when `prefix` is too short to
 * tell (fewer than 10 or 12 bytes). Throws DatasetFormatError on a bad magic, an unknown version or an oversized header.
 */
export function npyHeaderLength(prefix: Uint8Array): number | null {
  if (prefix.length < 8) {
    if (!NPY_MAGIC.subarray(0, Math.min(prefix.length, 6)).equals(Buffer.from(prefix.subarray(0, 6)))) badMagic();
    return null;
  }
  if (!NPY_MAGIC.equals(Buffer.from(prefix.subarray(0, 6)))) badMagic();
  const major = prefix[6];
  const minor = prefix[7];
  if (minor !== 0 || (major !== 1 && major !== 2 && major !== 3)) {
    throw new DatasetFormatError(`unsupported .npy format version ${major}.${minor} (supported: 1.0, 2.0, 3.0)`);
  }
  const fieldBytes = major === 1 ? 2 : 4;
  if (prefix.length < 8 + fieldBytes) return null;
  const view = new DataView(prefix.buffer, prefix.byteOffset, prefix.byteLength);
  const len = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  if (len > NPY_MAX_HEADER_BYTES) {
    throw new DatasetFormatError(`.npy header of ${len} bytes exceeds the ${NPY_MAX_HEADER_BYTES}-byte limit`);
  }
  return 8 + fieldBytes + len;
}

function badMagic(): never {
  throw new DatasetFormatError('not a .npy file: missing the \\x93NUMPY magic string');
}

/**
 * Parse the header of any .npy array held in `buf` (which must contain the whole header; it may hold more).
 * `fileSize`, when given, is the size of the whole file, used to report a header that runs past its end.
 */
export function parseNpyArrayHeader(buf: Uint8Array, fileSize?: number): NpyArrayHeader {
  const total = npyHeaderLength(buf);
  const size = fileSize ?? buf.length;
  if (total === null || total > size) {
    throw new DatasetFormatError(
      `.npy header runs past the end of the file (${total === null ? 'truncated prefix' : `needs ${total} bytes`}, file has ${size})`,
    );
  }
  if (total > buf.length) {
    throw new DatasetFormatError(`.npy header needs ${total} bytes but only ${buf.length} were read`);
  }
  const major = buf[6];
  const start = major === 1 ? 10 : 12;
  const bytes = buf.subarray(start, total);
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] > 0x7e || (bytes[i] < 0x20 && bytes[i] !== 0x0a && bytes[i] !== 0x09 && bytes[i] !== 0x0d)) {
      throw new DatasetFormatError(`.npy header has a non-ASCII byte 0x${bytes[i].toString(16)} at offset ${start + i}`);
    }
  }
  const text = Buffer.from(bytes).toString('latin1');
  const dict = parseHeaderDict(text);
  return { version: `${major}.0`, descr: dict.descr, fortranOrder: dict.fortranOrder, shape: dict.shape, dataOffset: total };
}

/**
 * Parse and validate the header of a dataset: a 2-D C-order array of little-endian float32 ('<f4') or float16 ('<f2')
 * whose data fills the rest of the file exactly. With `convert: 'f64-to-f32'` a float64 ('<f8') array is accepted too:
 * its layout delivers float32 rows (readers round each value to the nearest float32, as numpy's astype does).
 */
export function parseNpyHeader(buf: Uint8Array, fileSize: number, opts: { convert?: DatasetConversion } = {}): DatasetLayout {
  const h = parseNpyArrayHeader(buf, fileSize);
  const converting = h.descr === '<f8' && opts.convert === 'f64-to-f32';
  const dtype = converting ? 'f32' : datasetDType(h.descr);
  if (h.fortranOrder) {
    throw new DatasetFormatError('Fortran-order (column-major) .npy arrays are not supported; save a C-order array (np.ascontiguousarray)');
  }
  if (h.shape.length !== 2) {
    throw new DatasetFormatError(`dataset must be a 2-D array (rows, dims); this .npy has shape ${shapeText(h.shape)}`);
  }
  const [rows, dims] = h.shape;
  const itemSize = dtype === 'f32' ? 4 : 2;
  const storedItemSize = converting ? 8 : itemSize;
  if (rows === 0n) throw new DatasetFormatError(`dataset has no rows (shape ${shapeText(h.shape)})`);
  if (dims === 0n) throw new DatasetFormatError(`dataset rows have no dimensions (shape ${shapeText(h.shape)})`);
  const need = rows * dims * BigInt(storedItemSize);
  const have = BigInt(fileSize - h.dataOffset);
  if (need !== have) {
    throw new DatasetFormatError(
      `.npy shape ${shapeText(h.shape)} of ${h.descr} needs ${need} bytes of data but the file has ${have} after its ${h.dataOffset}-byte header`,
    );
  }
  // need === have <= fileSize <= 2^53, so these conversions are exact
  const r = Number(rows);
  const d = Number(dims);
  return {
    dtype, rows: r, dims: d, dataOffset: h.dataOffset, fortranOrder: false, itemSize, rowBytes: d * itemSize,
    storedRowBytes: d * storedItemSize, ...(converting ? { convert: 'f64-to-f32' as const, decoding: 'f64-to-f32' as const } : {}),
  };
}

function datasetDType(descr: string): DatasetDType {
  if (descr === '<f4') return 'f32';
  if (descr === '<f2') return 'f16';
  if (descr.startsWith('>') && /^>[fiuc]\d+$/.test(descr)) {
    throw new DatasetFormatError(`big-endian data ('${descr}') is not supported; save it little-endian (arr.astype('<${descr.slice(1)}'))`);
  }
  if (/^[|<>=]?O\d*$/.test(descr)) throw new DatasetFormatError(`object arrays ('${descr}') are not supported`);
  if (descr === '<f8') {
    throw new DatasetFormatError(
      "dtype '<f8' is not supported (float64, numpy's default); expected '<f4' (float32) or '<f2' (float16): save " +
        "arr.astype(np.float32), or let kmfleet round it as it reads (spec dataset.convert: \"f64-to-f32\"; kmfleet fit --convert f64-to-f32)",
    );
  }
  throw new DatasetFormatError(`dtype '${descr}' is not supported; expected '<f4' (float32) or '<f2' (float16)`);
}

export function shapeText(shape: readonly (bigint | number)[]): string {
  return shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
}

// ---- the dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } ----

interface HeaderDict { descr: string; fortranOrder: boolean; shape: bigint[] }
type Value = string | boolean | bigint[];

function parseHeaderDict(text: string): HeaderDict {
  let i = 0;
  const fail = (what: string): never => {
    throw new DatasetFormatError(`malformed .npy header dict (${what} at character ${i}): ${JSON.stringify(text.trim().slice(0, 200))}`);
  };
  const ws = () => { while (i < text.length && /\s/.test(text[i])) i++; };
  const expect = (c: string) => { ws(); if (text[i] !== c) fail(`expected '${c}'`); i++; };
  const str = (): string => {
    ws();
    const q = text[i];
    if (q !== "'" && q !== '"') fail('expected a string');
    const end = text.indexOf(q, i + 1);
    if (end < 0) fail('unterminated string');
    const s = text.slice(i + 1, end);
    if (s.includes('\\')) fail('escape in string');
    i = end + 1;
    return s;
  };
  const int = (): bigint => {
    ws();
    const m = /^(-?)(\d+)L?/.exec(text.slice(i, i + 40));
    if (!m) fail('expected an integer');
    if (m![1] === '-') throw new DatasetFormatError(`.npy shape has a negative dimension (${m![0]})`);
    if (m![2].length > 30) fail('integer too long');
    i += m![0].length;
    return BigInt(m![2]);
  };
  const value = (): Value => {
    ws();
    const c = text[i];
    if (c === "'" || c === '"') return str();
    if (c === '(') {
      i++;
      const items: bigint[] = [];
      for (;;) {
        ws();
        if (text[i] === ')') { i++; break; }
        if (items.length >= 32) fail('tuple too long');
        items.push(int());
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === ')') { i++; break; }
        fail("expected ',' or ')'");
      }
      return items;
    }
    if (text.startsWith('True', i)) { i += 4; return true; }
    if (text.startsWith('False', i)) { i += 5; return false; }
    if (c === '[') throw new DatasetFormatError('structured dtypes (a list descr) are not supported; expected \'<f4\' or \'<f2\'');
    return fail('unexpected value');
  };
  const fields = new Map<string, Value>();
  expect('{');
  for (;;) {
    ws();
    if (text[i] === '}') { i++; break; }
    const key = str();
    expect(':');
    if (fields.has(key)) fail(`duplicate key '${key}'`);
    fields.set(key, value());
    ws();
    if (text[i] === ',') { i++; continue; }
    if (text[i] === '}') { i++; break; }
    fail("expected ',' or '}'");
  }
  ws();
  if (i !== text.length) fail('trailing characters');
  const keys = [...fields.keys()].sort().join(',');
  if (keys !== 'descr,fortran_order,shape') {
    throw new DatasetFormatError(`.npy header must have exactly the keys descr, fortran_order, shape; found ${keys || 'none'}`);
  }
  const descr = fields.get('descr');
  const fortran = fields.get('fortran_order');
  const shape = fields.get('shape');
  if (typeof descr !== 'string') fail("'descr' is not a string");
  if (typeof fortran !== 'boolean') fail("'fortran_order' is not True or False");
  if (!Array.isArray(shape)) fail("'shape' is not a tuple");
  return { descr: descr as string, fortranOrder: fortran as boolean, shape: shape as bigint[] };
}
