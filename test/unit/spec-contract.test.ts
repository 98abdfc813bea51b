// The rest of the contract that needs no server: key names, REDIS_URL parsing, s3 URIs, progress, dataset limits.
import { describe, expect, it } from 'vitest';
import { ConnectionConfigError, connectionFromEnv } from '../../producer/index.js';
import { describeConnection, parseRedisUrl, redactRedisUrl } from '../../producer/connection.js';
import { JOB_ID_RE } from '../../producer/job-data.js';
import { keyspace } from '../../producer/keys.js';
import { DEFAULT_LIMITS, checkDatasetLimits } from '../../producer/limits.js';
import { makeProgress, asJobProgress } from '../../producer/progress.js';
import { parseS3ObjectUri, parseS3PrefixUri, s3Join } from '../../producer/s3-uri.js';

describe('keys', () => {
  it('puts every key under one hash tag, BullMQ prefix included', () => {
    const k = keyspace();
    const all = [
      k.iterations('j1'), k.checkpoint('j1'), k.cancel('j1'), k.cancelChannel,
      k.modelHistory('m'), k.modelResults('m'), k.modelLatest('m'), k.models, `${k.bullPrefix}:${k.queueName}:wait`,
    ];
    for (const key of all) expect(key.startsWith('{kmfleet}:')).toBe(true);
    expect(new Set(all).size).toBe(all.length);
    expect(k.iterations('j1')).toBe('{kmfleet}:job:jobs:j1:iterations');
    expect(k.modelLatest('emb')).toBe('{kmfleet}:model:emb:latest');
  });

  it('separates prefixes and queues, accepts scheduler job ids, refuses bad names', () => {
    const a = keyspace({ prefix: 'staging', queue: 'gpu-h100' });
    expect(a.bullPrefix).toBe('{staging}');
    expect(a.checkpoint('repeat:nightly:1700000000000')).toBe('{staging}:job:gpu-h100:repeat:nightly:1700000000000:checkpoint');
    expect(keyspace({ queue: 'q2' }).cancel('x')).not.toBe(keyspace().cancel('x'));
    expect(() => keyspace({ prefix: 'a:b' })).toThrow(/prefix/);
    expect(() => keyspace({ prefix: '{x}' })).toThrow(/prefix/);
    expect(() => keyspace({ queue: 'a b' })).toThrow(/queue/);
    expect(() => keyspace().iterations('')).toThrow(/job id/);
    expect(() => keyspace().modelHistory('a b')).toThrow(/model name/);
  });

  it('job ids that users pick are idempotency keys BullMQ accepts', () => {
    for (const ok of ['nightly-2026-11-22', 'a.b_c', 'x1', '...', '.x']) expect(JOB_ID_RE.test(ok)).toBe(true);
    for (const bad of ['', '123', 'a:b', 'a b', 'x'.repeat(129), '.', '..']) expect(JOB_ID_RE.test(bad)).toBe(false);
  });
});

describe('REDIS_URL', () => {
  it('parses host, port, db and the defaults', () => {
    expect(parseRedisUrl('redis://localhost')).toEqual({ host: 'localhost', port: 6379 });
    expect(parseRedisUrl('redis://10.0.0.5:7000/3')).toEqual({ host: '10.0.0.5', port: 7000, db: 3 });
    expect(parseRedisUrl('redis://h?db=2')).toEqual({ host: 'h', port: 6379, db: 2 });
    expect(parseRedisUrl('redis://[::1]:6380')).toEqual({ host: '::1', port: 6380 });
    expect(connectionFromEnv({})).toEqual({ host: '127.0.0.1', port: 6379 });
    expect(connectionFromEnv({ REDIS_URL: 'redis://r:1' })).toEqual({ host: 'r', port: 1 });
  });

  it('takes username and password (percent-decoded), and a bare password', () => {
    expect(parseRedisUrl('redis://:p%40ss%3Aw@h:1')).toEqual({ host: 'h', port: 1, password: 'p@ss:w' });
    expect(parseRedisUrl('redis://alice:s3cret@h:1/0')).toEqual({ host: 'h', port: 1, username: 'alice', password: 's3cret', db: 0 });
    expect(parseRedisUrl('redis://onlypw@h')).toEqual({ host: 'h', port: 6379, password: 'onlypw' });
  });

  it('turns on TLS for rediss:// with SNI for names (not for IPs)', () => {
    expect(parseRedisUrl('rediss://u:p@cache.example.com:6380')).toEqual({
      host: 'cache.example.com', port: 6380, username: 'u', password: 'p', tls: { servername: 'cache.example.com' },
    });
    expect(parseRedisUrl('rediss://10.1.2.3').tls).toEqual({});
  });

  it('refuses junk with a message that never shows the password', () => {
    const cases = ['http://u:hunter2@h', 'redis://:hunter2@h/abc', 'not a url hunter2', 'redis://:hunter2@'];
    for (const url of cases) {
      let err: unknown;
      try {
        parseRedisUrl(url);
      } catch (e) {
        err = e;
      }
      expect(err, url).toBeInstanceOf(ConnectionConfigError);
      expect((err as Error).message).not.toContain('hunter2');
    }
  });

  it('redacts and describes connections without the password', () => {
    expect(redactRedisUrl('redis://u:hunter2@h:1/2')).toBe('redis://u:***@h:1/2');
    expect(redactRedisUrl('redis://:hunter2@h')).toBe('redis://:***@h');
    expect(redactRedisUrl('redis://hunter2@h')).toBe('redis://***@h');
    expect(redactRedisUrl('redis://x:hun@ter2@h')).not.toContain('ter2');
    expect(redactRedisUrl('redis://h:1')).toBe('redis://h:1');
    expect(describeConnection(parseRedisUrl('rediss://bob:hunter2@h:9/4'))).toBe('rediss://bob@h:9/4');
  });
});

describe('s3 URIs', () => {
  it('parses objects and prefixes', () => {
    expect(parseS3ObjectUri('s3://my-bucket/a/b.npy')).toEqual({ bucket: 'my-bucket', key: 'a/b.npy' });
    expect(parseS3ObjectUri('s3://my-bucket')).toBeNull();
    expect(parseS3ObjectUri('s3://my-bucket/a/')).toBeNull();
    expect(parseS3PrefixUri('s3://my-bucket')).toEqual({ bucket: 'my-bucket', key: '' });
    expect(parseS3PrefixUri('s3://my-bucket/a/b/')).toEqual({ bucket: 'my-bucket', key: 'a/b' });
    expect(parseS3PrefixUri('s3://ab/x')).toBeNull(); // bucket names have 3+ characters
    expect(s3Join('s3://b12/out/', 'job:1', '/centroids.npy')).toBe('s3://b12/out/job:1/centroids.npy');
  });
});

describe('progress', () => {
  it('derives the reassigned fraction and an ETA from the iteration record', () => {
    const p = makeProgress({
      phase: 'iterating', iteration: 10, maxIter: 100, rows: 1000, msPerIteration: 20, now: 5,
      last: { iteration: 10, inertia: 12.5, reassigned: 50, shift: 0.25, ms: 20 }, settledFraction: 0.75,
    });
    expect(p).toEqual({
      phase: 'iterating', iteration: 10, maxIter: 100, inertia: 12.5, reassigned: 50, reassignedFraction: 0.05,
      shift: 0.25, settledFraction: 0.75, etaMs: 91 * 20, updatedAt: 5,
    });
    expect(makeProgress({ phase: 'opening', iteration: 0, maxIter: 5 }).etaMs).toBeNull();
    expect(asJobProgress(0)).toBeNull();
    expect(asJobProgress(p)).toBe(p);
  });
});

describe('dataset limits (checked by the worker once the header is read)', () => {
  it('names each limit that is exceeded and rows < k', () => {
    const l = { ...DEFAULT_LIMITS, maxRows: 100, maxDims: 8, maxDatasetBytes: 1000, maxCentroidBytes: 64 };
    expect(checkDatasetLimits({ rows: 100, dims: 2, bytes: 800 }, 8, l)).toEqual([]);
    const problems = checkDatasetLimits({ rows: 101, dims: 9, bytes: 1001 }, 200, l);
    expect(problems).toHaveLength(5);
    expect(problems.join('\n')).toMatch(/rows.*dims.*bytes.*centroids.*fewer than k/s);
  });
});
