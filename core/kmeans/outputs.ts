/**
 * Stream the results out of the engine: labels (int32 N) and distances (float32 N) are copied out a slice at a time
 * into an NpyWriter, so that N values never need one JS allocation; centroids are small and go in one write.
 */
import type { Engine } from '../../native/index.js';
import { NpyWriter, type NpyWriteResult } from '../formats/npy-writer.js';

const SLICE = 1 << 20;

export async function writeLabels(engine: Pick<Engine, 'labels'>, rows: number, writer: NpyWriter): Promise<NpyWriteResult> {
  if (writer.descr !== '<i4' || writer.shape.length !== 1 || writer.shape[0] !== rows) {
    throw new RangeError(`labels need an int32 (${rows},) writer, got ${writer.descr} (${writer.shape.join(', ')})`);
  }
  return streamSlices(rows, writer, (first, count) => engine.labels(first, count));
}

export async function writeDistances(engine: Pick<Engine, 'distances'>, rows: number, writer: NpyWriter): Promise<NpyWriteResult> {
  if (writer.descr !== '<f4' || writer.shape.length !== 1 || writer.shape[0] !== rows) {
    throw new RangeError(`distances need a float32 (${rows},) writer, got ${writer.descr} (${writer.shape.join(', ')})`);
  }
  return streamSlices(rows, writer, (first, count) => engine.distances(first, count));
}

export async function writeCentroids(centroids: Float32Array, k: number, dims: number, writer: NpyWriter): Promise<NpyWriteResult> {
  if (writer.descr !== '<f4' || writer.shape.join() !== `${k},${dims}` || centroids.length !== k * dims) {
    throw new RangeError(`centroids need a float32 (${k}, ${dims}) writer and array`);
  }
  try {
    await writer.write(centroids);
    return await writer.close();
  } catch (err) {
    await writer.abort();
    throw err;
  }
}

async function streamSlices(rows: number, writer: NpyWriter, slice: (first: number, count: number) => ArrayBufferView): Promise<NpyWriteResult> {
  try {
    for (let first = 0; first < rows; first += SLICE) await writer.write(slice(first, Math.min(SLICE, rows - first)));
    return await writer.close();
  } catch (err) {
    await writer.abort();
    throw err;
  }
}
