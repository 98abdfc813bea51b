/**
 * s3:// URIs as the spec uses them: `s3://bucket/key` for objects (dataset, initial centroids) and
 * `s3://bucket[/prefix]` for the output prefix. Bucket names follow S3's rules (3–63 chars, lowercase,
 * digits, dots, hyphens), so a typo fails at enqueue instead of on a worker.
 */
export interface S3Location {
  bucket: string;
  /** Object key, or prefix without a trailing slash ('' for the bucket root). */
  key: string;
}

const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

function split(uri: string): S3Location | null {
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(uri);
  if (!m || !BUCKET.test(m[1]) || m[1].includes('..')) return null;
  return { bucket: m[1], key: m[2] ?? '' };
}

/** `s3://bucket/key` of an object (non-empty key, not ending in '/'); null if it is not one. */
export function parseS3ObjectUri(uri: string): S3Location | null {
  const loc = split(uri);
  if (!loc || loc.key === '' || loc.key.endsWith('/') || loc.key.startsWith('/')) return null;
  return loc;
}

/** `s3://bucket` or `s3://bucket/prefix[/]`; the key comes back without a trailing slash. */
export function parseS3PrefixUri(uri: string): S3Location | null {
  const loc = split(uri);
  if (!loc || loc.key.startsWith('/') || loc.key.includes('//')) return null;
  return { bucket: loc.bucket, key: loc.key.replace(/\/+$/, '') };
}

export function formatS3Uri(loc: S3Location): string {
  return loc.key ? `s3://${loc.bucket}/${loc.key}` : `s3://${loc.bucket}`;
}

/** Joins a prefix URI and path parts: s3Join('s3://b/out', 'job1', 'centroids.npy'). */
export function s3Join(prefixUri: string, ...parts: string[]): string {
  const base = prefixUri.replace(/\/+$/, '');
  return [base, ...parts.map((p) => p.replace(/^\/+|\/+$/g, ''))].join('/');
}
