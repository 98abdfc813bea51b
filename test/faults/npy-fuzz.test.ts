/**
 * Fuzzer for core/formats (parseNpyHeader, npyHeaderLength, decodeNpy, rawLayout): random bytes, mutated valid
 * headers, huge / negative / overflowing shapes (rows × dims past 2^64), header lengths past the file, non-ASCII,
 * Fortran order, object / big-endian / structured dtypes. Every case must end in a DatasetFormatError or in a parse
 * whose numbers agree with the file size: no other exception type, no hang (a time budget per case), and no
 * allocation sized by the attacker (process.memoryUsage().arrayBuffers stays flat while parsing headers that claim
 * terabytes).
 *
 * Seeded: KMFLEET_FUZZ_SEED=<n> replays a run, KMFLEET_FUZZ_CASES=<n> changes the count (default 120 000). The seed
 * and the failing case's bytes (hex) are printed on failure.
 */
import { describe, expect, it } from 'vitest';
import { DatasetFormatError } from '../../core/formats/errors.js';
import { decodeNpy, encodeNpyHeader } from '../../core/formats/npy-encode.js';
import { NPY_MAX_HEADER_BYTES, npyHeaderLength, parseNpyHeader } from '../../core/formats/npy-header.js';
import { rawLayout } from '../../core/formats/raw.js';
import { Rng } from '../helpers/reference.js';

const SEED = Number(process.env.KMFLEET_FUZZ_SEED ?? (Date.now() % 2 ** 31));
const CASES = Number(process.env.KMFLEET_FUZZ_CASES ?? 120_000);

const DESCRS = ['<f4', '<f2', '>f4', '>f8', '<f8', '|O', 'O', '<O8', '<i4', '|u1', '<c8', 'f4', '=f4', '<U10', '', "<f4'", '<f4\\'];
const SHAPE_ITEMS = ['0', '1', '3', '-1', '-9223372036854775808', '18446744073709551616', '4294967296', '9007199254740993',
  '340282366920938463463374607431768211456', '99999999999999999999999999999', '123456789012345678901234567890123', '7L', '1e3', '0x10', ' 5 ', ''];

function header(r: () => number): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
  const n = Math.floor(r() * 4);
  const shape = Array.from({ length: n }, () => pick(SHAPE_ITEMS));
  const shapeText = r() < 0.1 ? pick(['[3, 4]', '3', '(', '((3, 4))', '(3 4)', '(,)']) : `(${shape.join(', ')}${n === 1 || r() < 0.3 ? ',' : ''})`;
  const fo = r() < 0.85 ? 'False' : pick(['True', 'false', '0', 'None', "'False'"]);
  const parts = [`'descr': '${pick(DESCRS)}'`, `'fortran_order': ${fo}`, `'shape': ${shapeText}`];
  if (r() < 0.05) parts.push(`'extra': 1`);
  if (r() < 0.05) parts.pop();
  if (r() < 0.05) parts.push(parts[0]);
  if (r() < 0.1) parts.sort(() => r() - 0.5);
  if (r() < 0.05) return `{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }`;
  return `{${parts.join(', ')}${r() < 0.5 ? ', ' : ''}}`;
}

/** A whole file: prefix (magic, version, length field) + dict + padding + some data bytes. */
function npyCase(r: () => number): Uint8Array {
  const dict = header(r);
  const major = r() < 0.7 ? 1 : r() < 0.5 ? 2 : r() < 0.7 ? 3 : Math.floor(r() * 256);
  const prefixLen = major === 1 ? 10 : 12;
  let hlen = Math.ceil((prefixLen + dict.length + 1) / 64) * 64 - prefixLen;
  const lie = r();
  if (lie < 0.05) hlen = Math.floor(r() * 0xffffffff);
  else if (lie < 0.1) hlen = NPY_MAX_HEADER_BYTES + 1;
  else if (lie < 0.15) hlen = Math.max(0, hlen - 1 - Math.floor(r() * 8));
  const dataBytes = r() < 0.5 ? Math.floor(r() * 64) * 4 : Math.floor(r() * 300);
  const body = Math.max(hlen, dict.length + 1);
  const buf = new Uint8Array(prefixLen + Math.min(body, 4096) + dataBytes).fill(0x20);
  buf.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, major, 0], 0);
  const dv = new DataView(buf.buffer);
  if (major === 1) dv.setUint16(8, hlen & 0xffff, true);
  else dv.setUint32(8, hlen >>> 0, true);
  for (let i = 0; i < dict.length && prefixLen + i < buf.length; i++) buf[prefixLen + i] = dict.charCodeAt(i);
  if (prefixLen + hlen - 1 < buf.length) buf[prefixLen + hlen - 1] = 0x0a;
  // mutations: flip bytes, non-ASCII, truncation
  const m = r();
  if (m < 0.15) {
    const flips = 1 + Math.floor(r() * 4);
    for (let f = 0; f < flips; f++) buf[Math.floor(r() * buf.length)] = Math.floor(r() * 256);
  } else if (m < 0.2) {
    buf[prefixLen + Math.floor(r() * dict.length)] = 0x80 + Math.floor(r() * 128);
  } else if (m < 0.3) {
    return buf.subarray(0, Math.floor(r() * buf.length));
  }
  return buf;
}

/** A valid file (the writer's own header, the exact data size), then perhaps one mutation: reaches the success paths. */
function validCase(r: () => number): Uint8Array {
  const descr = (['<f4', '<f2', '<f8', '<i4'] as const)[Math.floor(r() * 4)];
  const item = descr === '<f2' ? 2 : descr === '<f8' ? 8 : 4;
  const shape = r() < 0.8 ? [1 + Math.floor(r() * 20), 1 + Math.floor(r() * 8)] : [Math.floor(r() * 20)];
  const head = encodeNpyHeader(descr, shape);
  const buf = new Uint8Array(head.length + shape.reduce((a, b) => a * b, 1) * item);
  buf.set(head, 0);
  const m = r();
  if (m < 0.2) buf[Math.floor(r() * head.length)] = Math.floor(r() * 256);
  else if (m < 0.3) return buf.subarray(0, Math.floor(r() * buf.length));
  return buf;
}

function randomBytes(r: () => number): Uint8Array {
  const n = Math.floor(r() * 200);
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = Math.floor(r() * 256);
  if (n >= 6 && r() < 0.5) b.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59], 0);
  return b;
}

function hex(b: Uint8Array): string {
  return Buffer.from(b).toString('hex');
}

/** Runs `fn`; anything but a DatasetFormatError (with a non-empty message) is a failure. */
function expectCleanOutcome<T>(fn: () => T, describeCase: () => string): T | undefined {
  try {
    return fn();
  } catch (err) {
    if (err instanceof DatasetFormatError && err.message.length > 0) return undefined;
    throw new Error(`seed ${SEED}: ${(err as Error)?.name}: ${(err as Error)?.message}\n  case: ${describeCase()}`);
  }
}

describe(`npy/raw format fuzzing (seed ${SEED}, ${CASES} cases; replay with KMFLEET_FUZZ_SEED)`, () => {
  it('every case is a DatasetFormatError or a parse consistent with the file size; no hang; no attacker-sized allocation', () => {
    const rng = new Rng(SEED); // the reference's mulberry32: a seed replays the same cases
    const r = () => rng.uniform();
    let parsed = 0;
    let decoded = 0;
    const t0 = Date.now();
    let slowest = 0;
    if (globalThis.gc) globalThis.gc();
    const abBefore = process.memoryUsage().arrayBuffers;
    let abPeak = abBefore;
    for (let c = 0; c < CASES; c++) {
      const kind = r();
      const buf = kind < 0.15 ? randomBytes(r) : kind < 0.4 ? validCase(r) : npyCase(r);
      const fileSize = r() < 0.8 ? buf.length : Math.floor(r() * 2 ** 40);
      const what = () => `#${c} fileSize=${fileSize} bytes=${hex(buf.subarray(0, 400))}`;
      const t = performance.now();
      expectCleanOutcome(() => npyHeaderLength(buf), what);
      // a reader that got only the first bytes of a bigger file: the header parse alone
      const layout = expectCleanOutcome(() => parseNpyHeader(buf, fileSize), what);
      if (layout) {
        parsed++;
        const ok =
          (layout.dtype === 'f32' || layout.dtype === 'f16') &&
          Number.isSafeInteger(layout.rows) && layout.rows > 0 &&
          Number.isSafeInteger(layout.dims) && layout.dims > 0 &&
          layout.itemSize === (layout.dtype === 'f32' ? 4 : 2) &&
          layout.rowBytes === layout.dims * layout.itemSize &&
          layout.dataOffset > 0 && layout.dataOffset <= buf.length &&
          BigInt(layout.rows) * BigInt(layout.rowBytes) === BigInt(fileSize - layout.dataOffset);
        if (!ok) throw new Error(`seed ${SEED}: inconsistent layout ${JSON.stringify(layout)}\n  case: ${what()}`);
      }
      const dec = expectCleanOutcome(() => decodeNpy(buf), what);
      if (dec) {
        decoded++;
        const count = dec.shape.reduce((a, b) => a * b, 1);
        if (dec.data.length !== count) throw new Error(`seed ${SEED}: decodeNpy data length ${dec.data.length} != shape ${dec.shape}\n  case: ${what()}`);
      }
      // raw formats: sizes and dims of every kind
      const dimsPick = [undefined, 0, -1, 1, 3, 16, 2 ** 53, 1.5, NaN, Infinity, Math.floor(r() * 5000)][Math.floor(r() * 11)];
      const rawSize = [0, 1, 6, 64, 2 ** 53 - 1, 2 ** 60, Math.floor(r() * 2 ** 40), -8][Math.floor(r() * 8)];
      const fmt = r() < 0.5 ? 'f32' : 'f16';
      const raw = expectCleanOutcome(() => rawLayout(fmt, rawSize, dimsPick), () => `rawLayout(${fmt}, ${rawSize}, ${dimsPick})`);
      if (raw) {
        const ok = Number.isSafeInteger(raw.rows) && raw.rows > 0 && raw.dims === dimsPick &&
          BigInt(raw.rows) * BigInt(raw.rowBytes) === BigInt(rawSize);
        if (!ok) throw new Error(`seed ${SEED}: inconsistent raw layout ${JSON.stringify(raw)} for rawLayout(${fmt}, ${rawSize}, ${dimsPick})`);
      }
      const dt = performance.now() - t;
      if (dt > slowest) slowest = dt;
      if (dt > 1000) throw new Error(`seed ${SEED}: case took ${dt.toFixed(0)} ms (a hang?)\n  case: ${what()}`);
      if ((c & 1023) === 0) abPeak = Math.max(abPeak, process.memoryUsage().arrayBuffers);
    }
    abPeak = Math.max(abPeak, process.memoryUsage().arrayBuffers);
    const ms = Date.now() - t0;
    if (process.env.KMFLEET_TEST_DEBUG) console.log({ SEED, CASES, parsed, decoded, ms, slowest, growthKiB: (abPeak - abBefore) >> 10 });
    // the cases themselves are < 5 KiB each; a header claiming terabytes must never turn into an allocation
    expect(abPeak - abBefore, `seed ${SEED}: arrayBuffers grew by ${abPeak - abBefore} bytes`).toBeLessThan(64 * 1024 * 1024);
    // the generator must reach the success paths too, or it tests only the first check
    expect(parsed, `seed ${SEED}`).toBeGreaterThan(CASES / 200);
    expect(decoded, `seed ${SEED}`).toBeGreaterThan(CASES / 200);
  });

  it('headers that claim huge arrays are refused from the header alone, without allocating', () => {
    const claims: Array<[string, number[] | string]> = [
      ['<f4', '(18446744073709551616, 18446744073709551616)'],
      ['<f4', '(4294967296, 4294967296)'],
      ['<f2', '(9007199254740993, 1)'],
      ['<f4', '(1, 99999999999999999999999999999)'],
    ];
    for (const [descr, shape] of claims) {
      const dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
      const total = Math.ceil((10 + dict.length + 1) / 64) * 64;
      const buf = Buffer.alloc(total + 16, 0x20);
      Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]).copy(buf);
      buf.writeUInt16LE(total - 10, 8);
      buf.write(dict, 10, 'latin1');
      buf[total - 1] = 0x0a;
      const before = process.memoryUsage().arrayBuffers;
      expect(() => parseNpyHeader(buf, buf.length)).toThrow(DatasetFormatError);
      expect(() => parseNpyHeader(buf, 2 ** 50)).toThrow(DatasetFormatError);
      expect(() => decodeNpy(buf)).toThrow(DatasetFormatError);
      expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(1024 * 1024);
    }
    // and a valid header still parses (the fuzzer's baseline)
    const good = Buffer.concat([encodeNpyHeader('<f4', [3, 2]), Buffer.alloc(24)]);
    expect(parseNpyHeader(good, good.length)).toMatchObject({ rows: 3, dims: 2, dtype: 'f32' });
  });
});
