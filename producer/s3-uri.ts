/**
 * s3:// URIs as the spec uses them: `s3://bucket/key` for objects (dataset, initial centroids) and
 * `s3://bucket[/prefix]` for the output prefix. Bucket names follow S3's rules (3–63 chars, lowercase,
 * digits, dots, hyphens), so a typo fails at enqueue instead of on a worker.
 *
 * This is the one validator of both sides: the producer's spec check and the worker's parse (worker/s3/uri.ts) call
 * it. A key must not be able to name another bucket: the SDK sends `s3://out/../other/x` as the path
 * `/out/../other/x`, and a server or proxy that resolves dot-segments (s3rver does) reads bucket `other`. So keys
 * refuse `.`/`..` segments, empty segments (`//`, a leading `/`), backslashes (a path separator to some servers),
 * control characters, and percent-escapes that decode to any of these or to a `/` (a layer that decodes once more
 * would see other segments than the one that checked).
 */
export interface S3Location {
  bucket: string;
  /** Object key, or prefix without a trailing slash ('' for the bucket root). */
  key: string;
}

/** object: `s3://bucket/key` (a non-empty key, no trailing '/'); prefix: `s3://bucket[/prefix][/]`. */
export type S3UriKind = 'object' | 'prefix';

const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
// C0 controls and DEL: a CR/LF or NUL in a path means something else to each layer that reads it
const CONTROL = /[\x00-\x1f\x7f]/;

const FORM: Record<S3UriKind, string> = {
  object: 'must be an s3://bucket/key URI',
  prefix: 'must be an s3://bucket[/prefix] URI',
};

/** `%XX` escapes decoded until none is left, byte by byte (a double-encoded `%252e` is a dot to a layer that decodes twice). */
function decodeAll(s: string): string {
  for (let i = 0; i < 8; i++) {
    const next = s.replace(/%([0-9a-fA-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));
    if (next === s) return s;
    s = next;
  }
  return s;
}

/** Why `key` can't be used as a key of this kind (phrased to follow "must …; "), or null when it can. */
export function s3KeyProblem(key: string, kind: S3UriKind): string | null {
  if (kind === 'object' && (key === '' || key.endsWith('/'))) return 'the key must name an object (not empty, no trailing /)';
  const path = kind === 'prefix' && key.endsWith('/') ? key.slice(0, -1) : key;
  const decoded = decodeAll(path);
  if (CONTROL.test(decoded)) return 'the key must not contain control characters';
  if (decoded.includes('\\')) return 'the key must not contain backslashes (\\ or %5C)';
  if (decoded.split('/').length !== path.split('/').length) return 'the key must not contain percent-encoded slashes (%2F)';
  const empty = "the key must not contain empty path segments ('//', a leading or second trailing '/')";
  if (path === '') return key === '' ? null : empty;
  for (const segment of decoded.split('/')) {
    if (segment === '') return empty;
    if (segment === '.' || segment === '..') {
      return `the key must not contain '.' or '..' path segments (also percent-encoded): a server that resolves them reads another bucket`;
    }
  }
  return null;
}

/** Why `uri` is not a usable s3:// URI of this kind (a message that starts "must be an s3://…"), or null. */
export function s3UriProblem(uri: unknown, kind: S3UriKind): string | null {
  if (typeof uri !== 'string') return FORM[kind];
  const m = /^s3:\/\/([^/]*)(?:\/(.*))?$/s.exec(uri);
  if (!m) return FORM[kind];
  if (!BUCKET.test(m[1]) || m[1].includes('..')) return `${FORM[kind]}; bucket ${JSON.stringify(m[1])} is not an S3 bucket name (3-63 of a-z 0-9 . -)`;
  const problem = s3KeyProblem(m[2] ?? '', kind);
  return problem === null ? null : `${FORM[kind]}; ${problem}`;
}

function split(uri: string): S3Location {
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/s.exec(uri)!;
  return { bucket: m[1], key: m[2] ?? '' };
}

/** `s3://bucket/key` of an object (non-empty key, not ending in '/'); null if it is not one (s3UriProblem says why). */
export function parseS3ObjectUri(uri: string): S3Location | null {
  return s3UriProblem(uri, 'object') === null ? split(uri) : null;
}

/** `s3://bucket` or `s3://bucket/prefix[/]`; the key comes back without a trailing slash. */
export function parseS3PrefixUri(uri: string): S3Location | null {
  if (s3UriProblem(uri, 'prefix') !== null) return null;
  const loc = split(uri);
  return { bucket: loc.bucket, key: loc.key.replace(/\/$/, '') };
}

export function formatS3Uri(loc: S3Location): string {
  return loc.key ? `s3://${loc.bucket}/${loc.key}` : `s3://${loc.bucket}`;
}

/** Joins a prefix URI and path parts: s3Join('s3://b/out', 'job1', 'centroids.npy'). */
export function s3Join(prefixUri: string, ...parts: string[]): string {
  const base = prefixUri.replace(/\/+$/, '');
  return [base, ...parts.map((p) => p.replace(/^\/+|\/+$/g, ''))].join('/');
}
