/**
 * IEEE 754 binary16 <-> binary32 conversion (Node 20 has no Float16Array). Used to decode f16 rows on the JS side
 * (random init, small files) and to write f16 synthetic datasets. Round to nearest even, like numpy.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32ToF16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0); // inf / nan
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow -> inf
  if (e <= 0) {
    if (e < -10) return sign; // underflow -> ±0
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rest > halfway || (rest === halfway && (half & 1) !== 0)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (half & 1) !== 0)) half++; // may carry into the exponent: still correct
  return sign | half;
}

export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** Decode `count` little-endian f16 values starting at byte `offset` of `src` into `dst` (from dstOffset). */
export function decodeF16(src: Uint8Array, offset: number, count: number, dst: Float32Array, dstOffset = 0): void {
  const view = new DataView(src.buffer, src.byteOffset, src.byteLength);
  for (let i = 0; i < count; i++) dst[dstOffset + i] = f16BitsToF32(view.getUint16(offset + 2 * i, true));
}

/** The bf16 bits of a float32 value, rounded to nearest even (NaN kept quiet), like the engine's conversion. */
export function f32ToBf16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0];
  if ((x & 0x7fffffff) > 0x7f800000) return (x >>> 16) | 0x40;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

export function bf16BitsToF32(h: number): number {
  u32[0] = h << 16;
  return f32[0];
}

/** Encode float32 values as little-endian f16 bytes. */
export function encodeF16(values: Float32Array): Buffer {
  const out = Buffer.allocUnsafe(values.length * 2);
  for (let i = 0; i < values.length; i++) out.writeUInt16LE(f32ToF16Bits(values[i]), 2 * i);
  return out;
}
