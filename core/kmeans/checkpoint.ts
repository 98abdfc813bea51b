/**
 * Checkpoint bytes: "KMCKPT1\n", u32 LE length of a JSON header, the JSON (everything but the arrays), then the
 * centroids and the previous centroids as raw float32. Binary because K×D floats are large and must round-trip
 * bit for bit (a resumed run is bitwise identical to an uninterrupted one).
 */
import { KmeansSpecError } from './errors.js';
import type { KmeansCheckpoint } from './types.js';

const MAGIC = Buffer.from('KMCKPT1\n', 'latin1');

export function encodeCheckpoint(cp: KmeansCheckpoint): Buffer {
  const { centroids, previousCentroids, ...meta } = cp;
  const json = Buffer.from(JSON.stringify(meta), 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.length);
  return Buffer.concat([
    MAGIC,
    len,
    json,
    Buffer.from(centroids.buffer, centroids.byteOffset, centroids.byteLength),
    Buffer.from(previousCentroids.buffer, previousCentroids.byteOffset, previousCentroids.byteLength),
  ]);
}

export function decodeCheckpoint(buf: Buffer): KmeansCheckpoint {
  if (buf.length < 12 || !buf.subarray(0, 8).equals(MAGIC)) throw new KmeansSpecError('not a kmfleet checkpoint (bad magic)');
  const len = buf.readUInt32LE(8);
  if (12 + len > buf.length) throw new KmeansSpecError('truncated checkpoint header');
  const meta = JSON.parse(buf.subarray(12, 12 + len).toString('utf8')) as Omit<KmeansCheckpoint, 'centroids' | 'previousCentroids'>;
  if (meta.version !== 1) throw new KmeansSpecError(`unsupported checkpoint version ${String(meta.version)}`);
  const n = meta.k * meta.dims;
  if (!Number.isSafeInteger(n) || buf.length !== 12 + len + 8 * n) throw new KmeansSpecError('checkpoint size does not match its k × dims');
  const data = buf.subarray(12 + len);
  const copy = (from: number) => {
    const out = new Float32Array(n);
    Buffer.from(out.buffer).set(data.subarray(from, from + 4 * n));
    return out;
  };
  return { ...meta, centroids: copy(0), previousCentroids: copy(4 * n) };
}

/** Check that a checkpoint belongs to this dataset and spec before resuming from it. */
export function checkCheckpoint(cp: KmeansCheckpoint, rows: number, dims: number, k: number, metric: string, maxIter: number): void {
  const fail = (what: string): never => { throw new KmeansSpecError(`checkpoint does not match this run: ${what}`); };
  if (cp.version !== 1) fail(`version ${cp.version}`);
  if (cp.rows !== rows) fail(`rows ${cp.rows} ≠ ${rows}`);
  if (cp.dims !== dims) fail(`dims ${cp.dims} ≠ ${dims}`);
  if (cp.k !== k) fail(`k ${cp.k} ≠ ${k}`);
  if (cp.metric !== metric) fail(`metric ${cp.metric} ≠ ${metric}`);
  if (!Number.isSafeInteger(cp.iteration) || cp.iteration < 1 || cp.iteration > maxIter) fail(`iteration ${cp.iteration} (maxIter ${maxIter})`);
  if (cp.history.length !== cp.iteration) fail(`history of ${cp.history.length} entries for iteration ${cp.iteration}`);
  if (cp.centroids.length !== k * dims || cp.previousCentroids.length !== k * dims) fail('centroid array sizes');
  const plan = cp.sumsPlan;
  if (plan !== undefined) {
    if (plan.backend !== 'cpu' && plan.backend !== 'cuda') fail(`sums plan backend ${String(plan.backend)}`);
    if (!Number.isSafeInteger(plan.chunkRows) || plan.chunkRows < 1 || plan.chunkRows > rows) fail(`sums plan chunkRows ${String(plan.chunkRows)}`);
  }
}
