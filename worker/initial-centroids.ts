/**
 * Resolve spec.init into what the driver takes: 'kmeans++' | 'random' as they are; an s3:// .npy of K×D float32
 * centroids, or 'previous' (the centroids of the latest result of model `name`, a warm start; kmeans++ when the model
 * has no result yet), loaded into a Float32Array. Shape and finiteness are checked by the driver.
 */
import type { RedisClient } from '../producer/job-state.js';
import type { Keys } from '../producer/keys.js';
import { readLatest } from '../producer/results.js';
import type { JobSpec } from '../producer/spec.js';
import { decodeNpy } from '../core/index.js';
import { JobInputError } from './failures.js';
import type { S3Handle } from './s3/client.js';
import { S3ObjectNotFoundError } from './s3/errors.js';
import { getObjectBuffer } from './s3/objects.js';
import { parseS3UriOf } from './s3/uri.js';

export interface ResolvedInit {
  init: 'kmeans++' | 'random' | Float32Array;
  /** where given centroids came from */
  from?: string;
  /** why 'previous' fell back to kmeans++ */
  note?: string;
}

export async function resolveInit(spec: JobSpec, redis: RedisClient, keys: Keys, s3: S3Handle): Promise<ResolvedInit> {
  if (spec.init === 'kmeans++' || spec.init === 'random') return { init: spec.init };
  let uri: string;
  let field = 'init';
  if (spec.init === 'previous') {
    const latest = spec.name ? await readLatest(redis, keys, spec.name) : null;
    if (!latest) return { init: 'kmeans++', note: `model ${spec.name} has no result yet: kmeans++ with seed ${spec.seed}` };
    uri = latest.outputs.centroids;
    field = `init (previous: the centroids of model ${spec.name}'s latest result)`;
  } else {
    uri = spec.init;
  }
  let buf: Buffer;
  try {
    buf = await getObjectBuffer(s3, parseS3UriOf(field, uri, 'object'));
  } catch (err) {
    if (err instanceof S3ObjectNotFoundError) throw new JobInputError(`initial centroids not found: ${uri}`);
    throw err;
  }
  const npy = decodeNpy(buf);
  if (npy.descr !== '<f4' && npy.descr !== '<f2') throw new JobInputError(`initial centroids ${uri} are ${npy.descr}; expected float32`);
  if (npy.shape.length !== 2 || npy.shape[0] !== spec.k) {
    throw new JobInputError(`initial centroids ${uri} have shape (${npy.shape.join(', ')}); expected (${spec.k}, dims)`);
  }
  return { init: npy.data as Float32Array, from: uri };
}
