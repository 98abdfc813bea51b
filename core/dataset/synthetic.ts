/**
 * Seeded synthetic datasets, streamed to .npy chunk by chunk (a billion rows never sit in memory):
 *   blobs  — sklearn's make_blobs: centers uniform in [-centerBox, centerBox]^D, each row a center plus N(0, std²)
 *            noise; the center of each row is drawn uniformly (streaming cannot shuffle equal-sized groups)
 *   normal — every value N(0, 1)
 * The same options give the same bytes on every machine.
 */
import { encodeF16 } from '../formats/half.js';
import { NpyWriter, type NpyWriteResult } from '../formats/npy-writer.js';
import { Rng } from '../kmeans/prng.js';

export type SyntheticKind = 'blobs' | 'normal';

export interface SyntheticOptions {
  kind: SyntheticKind;
  rows: number;
  dims: number;
  /** number of blob centers (blobs only) */
  centers?: number;
  seed?: number;
  dtype?: 'f32' | 'f16';
  /** blob standard deviation (default 1) */
  clusterStd?: number;
  /** centers are drawn from [-centerBox, centerBox] (default 10) */
  centerBox?: number;
  /** rows generated per chunk (default 8192) */
  chunkRows?: number;
  /** called after each chunk with rows written so far */
  onProgress?: (rowsDone: number) => void;
}

export interface SyntheticResult extends NpyWriteResult {
  path: string;
  rows: number;
  dims: number;
  /** the blob centers (blobs only), float32 centers × dims */
  centers?: Float32Array;
}

export function checkSyntheticOptions(o: SyntheticOptions): void {
  const posInt = (name: string, v: number | undefined) => {
    if (v === undefined || !Number.isSafeInteger(v) || v < 1) throw new RangeError(`${name} must be a positive integer, got ${v}`);
  };
  posInt('rows', o.rows);
  posInt('dims', o.dims);
  if (o.kind === 'blobs') posInt('centers', o.centers ?? 8);
  else if (o.kind !== 'normal') throw new RangeError(`unknown kind '${o.kind}' (blobs | normal)`);
  if (o.dtype !== undefined && o.dtype !== 'f32' && o.dtype !== 'f16') throw new RangeError(`dtype must be f32 or f16, got ${o.dtype}`);
}

/** Generate into `path` (created or truncated; on failure the partial file is removed). */
export async function generateDataset(path: string, o: SyntheticOptions): Promise<SyntheticResult> {
  checkSyntheticOptions(o);
  const { rows, dims } = o;
  const seed = o.seed ?? 0;
  const dtype = o.dtype ?? 'f32';
  const std = o.clusterStd ?? 1;
  const box = o.centerBox ?? 10;
  const chunkRows = Math.max(1, Math.min(o.chunkRows ?? 8192, rows));
  const rng = new Rng(seed, 0x5eed);
  let centers: Float32Array | undefined;
  if (o.kind === 'blobs') {
    const c = o.centers ?? 8;
    centers = new Float32Array(c * dims);
    for (let i = 0; i < centers.length; i++) centers[i] = (rng.nextFloat() * 2 - 1) * box;
  }
  const writer = NpyWriter.toFile(path, dtype === 'f32' ? '<f4' : '<f2', [rows, dims]);
  try {
    const chunk = new Float32Array(chunkRows * dims);
    for (let first = 0; first < rows; first += chunkRows) {
      const n = Math.min(chunkRows, rows - first);
      if (centers) {
        const nc = centers.length / dims;
        for (let r = 0; r < n; r++) {
          const base = rng.nextInt(nc) * dims;
          for (let j = 0; j < dims; j++) chunk[r * dims + j] = centers[base + j] + std * rng.normal();
        }
      } else {
        for (let i = 0; i < n * dims; i++) chunk[i] = rng.normal();
      }
      const part = chunk.subarray(0, n * dims);
      await writer.write(dtype === 'f32' ? part : encodeF16(part));
      o.onProgress?.(first + n);
    }
    const res = await writer.close();
    return { ...res, path, rows, dims, centers };
  } catch (err) {
    await writer.abort();
    throw err;
  }
}
