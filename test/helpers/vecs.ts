/** fvecs / bvecs bytes written by hand, as the ANN benchmarks' files are laid out: per row an int32 dim count, then the values. */
export function encodeFvecs(values: Float32Array, dims: number): Buffer {
  const rows = values.length / dims;
  const out = Buffer.alloc(rows * (4 + 4 * dims));
  for (let r = 0; r < rows; r++) {
    const at = r * (4 + 4 * dims);
    out.writeInt32LE(dims, at);
    Buffer.from(values.buffer, values.byteOffset + r * dims * 4, dims * 4).copy(out, at + 4);
  }
  return out;
}

export function encodeBvecs(values: Uint8Array, dims: number): Buffer {
  const rows = values.length / dims;
  const out = Buffer.alloc(rows * (4 + dims));
  for (let r = 0; r < rows; r++) {
    out.writeInt32LE(dims, r * (4 + dims));
    out.set(values.subarray(r * dims, (r + 1) * dims), r * (4 + dims) + 4);
  }
  return out;
}
