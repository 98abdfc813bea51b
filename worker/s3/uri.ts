/**
 * s3://bucket/key addresses: the job spec and outputs name objects this way (DESIGN.md, Contracts).
 *
 * Every parse and every key built here goes through the producer's validator (producer/s3-uri.ts), the same one that
 * checks specs at enqueue: a URI or job id that would let a key be read as another bucket ('..', '//', …) throws
 * UnsafeS3UriError naming the field, whatever put the job into Redis.
 */
import { s3KeyProblem, s3UriProblem, type S3Location, type S3UriKind } from '../../producer/s3-uri.js';
import { UnsafeS3UriError } from './errors.js';

export type { S3Location };

/** `s3://bucket[/key]` → { bucket, key } (one trailing '/' dropped); UnsafeS3UriError when it is not a usable URI. */
export function parseS3Uri(uri: string): S3Location {
  return parseS3UriOf('s3 URI', uri);
}

/** parseS3Uri for the URI of a spec field: the error names `field`; kind 'object' also needs a key without a trailing '/'. */
export function parseS3UriOf(field: string, uri: string, kind: S3UriKind = 'prefix'): S3Location {
  const problem = s3UriProblem(uri, kind);
  if (problem !== null) throw new UnsafeS3UriError(field, uri, problem);
  const m = /^s3:\/\/([^/]+)\/?(.*)$/s.exec(uri)!;
  return { bucket: m[1], key: m[2].replace(/\/$/, '') };
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

/** Why `jobId` can't be the one path segment <output>/<jobId>/ (it must not add or climb segments), or null. */
export function jobIdKeyProblem(jobId: string): string | null {
  if (jobId.includes('/')) return 'must not contain /: it is one path segment of the job\'s output keys';
  const problem = s3KeyProblem(jobId, 'object');
  return problem === null ? null : problem.replace(/^the key /, '');
}

/**
 * `<prefix>/<segments...>` as a location inside the prefix's bucket. The joined key is checked too: a segment such as a
 * job id `..` must not climb out of the prefix into another bucket.
 */
export function childOf(prefixUri: string, ...segments: string[]): S3Location {
  const base = parseS3UriOf('output', prefixUri);
  const loc = { bucket: base.bucket, key: joinKey(base.key, ...segments) };
  const problem = s3KeyProblem(loc.key, 'prefix');
  if (problem !== null) throw new UnsafeS3UriError('output', formatS3Uri(loc), `the job's key under the output prefix is unsafe: ${problem}`);
  return loc;
}
