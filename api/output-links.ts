/**
 * Presigned GET URLs for a completed job's outputs: a client in any language downloads centroids.npy, assignments.npy
 * and summary.json with a plain HTTP GET, straight from S3 (no S3 SDK, no credentials of its own, and no bytes through
 * this server). The URLs are signed with the API server's S3 credentials (the AWS standard chain, KMFLEET_S3_* as for
 * workers) and point at its S3 endpoint: clients must be able to reach that endpoint.
 */
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { parseS3ObjectUri } from '../producer/s3-uri.js';
import type { JobOutputs } from '../producer/results.js';
import type { S3Handle } from '../worker/s3/client.js';

export interface OutputLink {
  uri: string;
  url: string;
}

export interface OutputLinks {
  jobId: string;
  expiresInSeconds: number;
  files: { centroids: OutputLink; assignments: OutputLink; distances?: OutputLink; summary: OutputLink };
}

export async function presignOutputs(s3: S3Handle, jobId: string, outputs: JobOutputs, expiresIn: number): Promise<OutputLinks> {
  const link = async (uri: string): Promise<OutputLink> => {
    const loc = parseS3ObjectUri(uri);
    if (!loc) throw new Error(`job ${jobId} names an output that is not an s3:// object: ${JSON.stringify(uri)}`);
    const url = await getSignedUrl(s3.client, new GetObjectCommand({ Bucket: loc.bucket, Key: loc.key }), { expiresIn });
    return { uri, url };
  };
  const [centroids, assignments, summary, distances] = await Promise.all([
    link(outputs.centroids),
    link(outputs.assignments),
    link(outputs.summary),
    outputs.distances ? link(outputs.distances) : undefined,
  ]);
  return { jobId, expiresInSeconds: expiresIn, files: { centroids, assignments, summary, ...(distances ? { distances } : {}) } };
}
