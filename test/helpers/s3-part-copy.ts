/**
 * UploadPartCopy for tests, which s3rver 3.7.1 answers NotImplemented: a server on a random loopback port in front of
 * a test s3rver (./s3-server.ts) that passes every request through unchanged but an UploadPartCopy, which it carries
 * out as S3 does: the source range read from s3rver and stored there as that part of the upload, answered with a
 * CopyPartResult whose ETag is the part's md5 (S3's, for an unencrypted part). Goes under the fault proxy:
 *
 *   const copying = await startS3PartCopy(s3);
 *   const proxy = await startS3FaultProxy(copying, { fault });   // the client talks to the proxy
 *   await copying.stop();                                         // stops this server only, not s3rver
 */
import { createServer, request } from 'node:http';
import { UploadPartCommand } from '@aws-sdk/client-s3';
import { readRangeInto } from '../../worker/s3/objects.js';
import type { S3ServerHandle } from './s3-server.js';

export async function startS3PartCopy(s3: S3ServerHandle): Promise<S3ServerHandle> {
  const copyPart = async (bucket: string, key: string, url: URL, source: string, range: string | undefined): Promise<string> => {
    const [fromBucket = '', ...fromKey] = decodeURIComponent(source).replace(/^\//, '').split('/');
    const m = /^bytes=(\d+)-(\d+)$/.exec(range ?? '');
    if (!m) throw new Error(`x-amz-copy-source-range ${range}: the fleet always sends one`);
    const start = Number(m[1]);
    const body = Buffer.alloc(Number(m[2]) - start + 1);
    await readRangeInto(s3.handle, { bucket: fromBucket, key: fromKey.join('/') }, start, body.length, body, 0);
    const part = { Bucket: bucket, Key: key, UploadId: url.searchParams.get('uploadId')!, PartNumber: Number(url.searchParams.get('partNumber')), Body: body };
    const r = await s3.handle.client.send(new UploadPartCommand(part));
    return r.ETag!;
  };

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://s3');
    const source = req.headers['x-amz-copy-source'];
    if (req.method === 'PUT' && url.searchParams.has('partNumber') && typeof source === 'string') {
      req.resume();
      const [, bucket = '', ...key] = decodeURIComponent(url.pathname).split('/');
      const range = req.headers['x-amz-copy-source-range'];
      copyPart(bucket, key.join('/'), url, source, typeof range === 'string' ? range : undefined).then(
        (etag) => {
          res.writeHead(200, { 'content-type': 'application/xml' });
          res.end(`<?xml version="1.0" encoding="UTF-8"?><CopyPartResult><LastModified>${new Date().toISOString()}</LastModified><ETag>${etag}</ETag></CopyPartResult>`);
        },
        (err: Error) => {
          res.writeHead(500, { 'content-type': 'application/xml' });
          res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>${err.message}</Message></Error>`);
        },
      );
      return;
    }
    const up = request({ host: '127.0.0.1', port: s3.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
      res.writeHead(upRes.statusCode!, upRes.headers);
      upRes.pipe(res);
    });
    up.on('error', () => req.socket.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  const endpoint = `http://127.0.0.1:${port}`;
  let stopped = false;
  return {
    ...s3,
    port,
    endpoint,
    settings: { ...s3.settings, endpoint },
    env: { ...s3.env, KMFLEET_S3_ENDPOINT: endpoint },
    async stop() {
      if (stopped) return;
      stopped = true;
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
