/**
 * Retries against real faults: an HTTP proxy in front of s3rver that answers 503 SlowDown, resets connections before
 * answering, or cuts a ranged GET's body mid-stream. Reads must come back complete and correct; 4xx must not retry.
 */
import { randomBytes } from 'node:crypto';
import { createServer, request, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createS3, type S3Handle } from '../../worker/s3/client.js';
import { S3ObjectNotFoundError } from '../../worker/s3/errors.js';
import { headObject, putObjectBuffer, readRangeInto } from '../../worker/s3/objects.js';
import { backoffMs, isRetryableS3Error } from '../../worker/s3/retry.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';

type Fault = 'slowdown' | 'reset' | 'truncate';

describe('S3 retries through a fault-injecting proxy', () => {
  let s3: S3ServerHandle;
  let proxy: Server;
  let client: S3Handle;
  const faults: Fault[] = [];
  const seen: string[] = [];
  const body = randomBytes(3 * 1024 * 1024);

  beforeAll(async () => {
    s3 = await startS3Server({ buckets: ['data'] });
    await s3.put('data', 'blob', body);
    proxy = createServer((req, res) => {
      const fault = faults.shift();
      seen.push(`${req.method} ${fault ?? 'ok'}`);
      if (fault === 'slowdown') {
        res.writeHead(503, { 'content-type': 'application/xml' });
        res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>');
        return;
      }
      if (fault === 'reset') {
        req.socket.destroy();
        return;
      }
      const up = request({ host: '127.0.0.1', port: s3.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
        res.writeHead(upRes.statusCode!, upRes.headers);
        if (fault === 'truncate') {
          upRes.once('data', (chunk: Buffer) => {
            res.write(chunk.subarray(0, Math.min(chunk.length, 1000)));
            setTimeout(() => res.socket?.destroy(), 10);
          });
        } else upRes.pipe(res);
      });
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const port = (proxy.address() as { port: number }).port;
    client = createS3({ ...s3.settings, endpoint: `http://127.0.0.1:${port}`, maxAttempts: 4, retry: { attempts: 4, baseMs: 5, maxMs: 20 } });
  });
  afterAll(async () => {
    client?.destroy();
    proxy?.closeAllConnections();
    await new Promise((r) => proxy?.close(r));
    await s3?.stop();
  });

  it('SlowDown and resets before the answer are retried with backoff (SDK), bodies cut mid-stream by us', async () => {
    const loc = { bucket: 'data', key: 'blob' };
    faults.push('slowdown', 'reset');
    const { etag } = await headObject(client, loc);
    const target = Buffer.alloc(2 * 1024 * 1024);
    faults.push('truncate', 'slowdown');
    seen.length = 0;
    await readRangeInto(client, loc, 1000, target.length, target, 0, { etag });
    expect(target.equals(body.subarray(1000, 1000 + target.length))).toBe(true);
    expect(seen).toEqual(['GET truncate', 'GET slowdown', 'GET ok']);
  });

  it('PUT of a Buffer survives a 503', async () => {
    faults.push('slowdown');
    await putObjectBuffer(client, { bucket: 'data', key: 'put-after-503' }, Buffer.from('hello'));
    expect((await s3.get('data', 'put-after-503')).toString()).toBe('hello');
  });

  it('4xx is not retried; backoff has full jitter under a ceiling', async () => {
    seen.length = 0;
    await expect(headObject(client, { bucket: 'data', key: 'missing' })).rejects.toBeInstanceOf(S3ObjectNotFoundError);
    expect(seen).toEqual(['HEAD ok']);
    expect(isRetryableS3Error({ $metadata: { httpStatusCode: 403 }, name: 'AccessDenied' })).toBe(false);
    expect(isRetryableS3Error({ $metadata: { httpStatusCode: 503 }, name: 'SlowDown' })).toBe(true);
    expect(isRetryableS3Error(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }))).toBe(true);
    const policy = { attempts: 5, baseMs: 100, maxMs: 1000 };
    expect(backoffMs(0, policy, () => 0.999)).toBe(99);
    expect(backoffMs(6, policy, () => 0.5)).toBe(500);
    expect(backoffMs(3, policy, () => 0)).toBe(0);
  });
});
