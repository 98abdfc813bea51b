/**
 * s3://bucket/key addresses: the job spec and outputs name objects this way (DESIGN.md, Contracts).
 */
export interface S3Location {
  bucket: string;
  key: string;
}

export function parseS3Uri(uri: string): S3Location {
  const m = /^s3:\/\/([^/]+)\/?(.*)$/.exec(uri);
  if (!m || !m[1]) throw new Error(`not an s3:// uri: ${JSON.stringify(uri)}`);
  return { bucket: m[1], key: m[2] ?? '' };
}

export function formatS3Uri(loc: S3Location): string {
  return `s3://${loc.bucket}/${loc.key}`;
}

/** Join key segments with exactly one '/' between them (an output prefix may or may not end in '/'). */
export function joinKey(...parts: string[]): string {
  return parts
    .filter((p) => p.length > 0)
    .map((p, i) => (i === 0 ? p.replace(/\/+$/, '') : p.replace(/^\/+|\/+$/g, '')))
    .filter((p) => p.length > 0)
    .join('/');
}

/** `<prefix>/<segments...>` as a location inside the prefix's bucket. */
export function childOf(prefixUri: string, ...segments: string[]): S3Location {
  const base = parseS3Uri(prefixUri);
  return { bucket: base.bucket, key: joinKey(base.key, ...segments) };
}
