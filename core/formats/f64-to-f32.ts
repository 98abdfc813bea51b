/**
 * float64 → float32, the opt-in conversion of a dataset's rows (spec dataset.convert 'f64-to-f32'): each value rounded
 * to the nearest float32, ties to even — what numpy's astype(np.float32) does, so a converted dataset clusters exactly
 * like its float32 cast. Values beyond float32's range become ±Infinity, which the engine refuses as non-finite input
 * (naming the row), as it refuses NaN.
 */

/** Converts `values` little-endian float64s at the start of `src` into float32s at the start of `dst`. */
export function convertF64ToF32(src: Uint8Array, dst: Uint8Array, values: number): void {
  if (src.length < values * 8 || dst.length < values * 4) {
    throw new RangeError(`convertF64ToF32: ${values} values need ${values * 8} source and ${values * 4} target bytes`);
  }
  // typed views need aligned offsets; the engine's buffers and fresh allocations are, a view into a pooled Buffer may not be
  if (src.byteOffset % 8 === 0 && dst.byteOffset % 4 === 0) {
    new Float32Array(dst.buffer, dst.byteOffset, values).set(new Float64Array(src.buffer, src.byteOffset, values));
    return;
  }
  const from = new DataView(src.buffer, src.byteOffset, values * 8);
  const to = new DataView(dst.buffer, dst.byteOffset, values * 4);
  for (let i = 0; i < values; i++) to.setFloat32(i * 4, from.getFloat64(i * 8, true), true);
}
