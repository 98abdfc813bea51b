/**
 * Real S3 faults for tests: an HTTP proxy on a random loopback port in front of a test s3rver (./s3-server.ts). Each
 * request is shown to `fault`, which either lets it through to s3rver (undefined) or names what goes wrong instead:
 *
 *   const proxy = await startS3FaultProxy(s3, { fault: (r) => (r.n === 1 ? slowDown() : undefined) });
 *   const client = createS3({ ...proxy.settings, maxAttempts: 4 });   // the S3 client talks to the proxy
 *   proxy.requests                                                   // every request, with the fault it got
 *   await proxy.stop();
 *
 * Faults: `s3Error` (an S3 XML error answer: `slowDown()` 503, `accessDenied()` 403), `reset()` (the connection dies
 * before any answer), `truncate(n)` (s3rver's status and headers, then the body cut after n bytes: a body that short
 * goes through whole), `delay(ms)` (held, then forwarded), `hold(promise)` (held until the promise settles: a request
 * in flight while the test freezes or partitions its sender), `reply(status)` (answered here: an operation that s3rver
 * 3.7.1 does not implement), `loseAnswer()` (s3rver does it, then the connection dies before its answer: a retry
 * repeats an operation that already happened). `onResponse` sees s3rver's answers (buffered) for ledgers of what really happened.
 */
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { S3Settings } from '../../worker/s3/client.js';
import type { S3ServerHandle } from './s3-server.js';

/** What the S3 API call is, from method, path (path style: /bucket/key) and query. */
export type S3Operation =
  | 'CreateMultipartUpload' | 'UploadPart' | 'CompleteMultipartUpload' | 'AbortMultipartUpload'
  | 'PutObject' | 'GetObject' | 'HeadObject' | 'DeleteObject' | 'BucketRequest' | 'Other';

export interface ProxiedRequest {
  /** 1-based: the n-th request this proxy has taken */
  readonly n: number;
  readonly method: string;
  readonly url: URL;
  readonly bucket: string;
  readonly key: string;
  readonly operation: S3Operation;
  readonly headers: IncomingMessage['headers'];
  /** the fault it got, once applied: an S3 error code, 'reset', 'truncate', 'delay', 'reply <status>' or 'answer lost' */
  fault?: string;
}

export type S3Fault =
  | { kind: 'error'; status: number; code: string; message: string }
  | { kind: 'reset' }
  | { kind: 'truncate'; afterBytes: number }
  | { kind: 'delay'; ms: number }
  | { kind: 'hold'; until: Promise<unknown> }
  | { kind: 'reply'; status: number; body?: string }
  | { kind: 'lose' };

export const s3Error = (status: number, code: string, message: string): S3Fault => ({ kind: 'error', status, code, message });
export const slowDown = (): S3Fault => s3Error(503, 'SlowDown', 'Please reduce your request rate.');
export const accessDenied = (): S3Fault => s3Error(403, 'AccessDenied', 'Access Denied');
export const reset = (): S3Fault => ({ kind: 'reset' });
export const truncate = (afterBytes = 1000): S3Fault => ({ kind: 'truncate', afterBytes });
export const delay = (ms: number): S3Fault => ({ kind: 'delay', ms });
/** held until `until` settles, then forwarded — unless the client gave up meanwhile (S3 drops an aborted request) */
export const hold = (until: Promise<unknown>): S3Fault => ({ kind: 'hold', until });
export const reply = (status: number, body?: string): S3Fault => ({ kind: 'reply', status, body });
export const loseAnswer = (): S3Fault => ({ kind: 'lose' });

export interface S3FaultProxyOptions {
  /** the fault for one request, or undefined to pass it to s3rver unchanged */
  fault?: (req: ProxiedRequest) => S3Fault | undefined;
  /** s3rver's answer to a request that went through, also one whose answer is then lost (not called for other faults) */
  onResponse?: (req: ProxiedRequest, status: number, body: Buffer) => void;
}

export interface S3FaultProxy {
  readonly port: number;
  readonly endpoint: string;
  /** the s3rver's client settings with the proxy as endpoint */
  readonly settings: S3Settings;
  /** every request so far, in arrival order */
  readonly requests: ProxiedRequest[];
  stop(): Promise<void>;
}

export function s3OperationOf(method: string, url: URL): S3Operation {
  const q = url.searchParams;
  const hasKey = url.pathname.replace(/^\/[^/]*\/?/, '') !== '';
  if (method === 'POST' && q.has('uploads')) return 'CreateMultipartUpload';
  if (method === 'PUT' && q.has('partNumber')) return 'UploadPart';
  if (method === 'POST' && q.has('uploadId')) return 'CompleteMultipartUpload';
  if (method === 'DELETE' && q.has('uploadId')) return 'AbortMultipartUpload';
  if (!hasKey) return 'BucketRequest';
  if (method === 'PUT') return 'PutObject';
  if (method === 'GET') return 'GetObject';
  if (method === 'HEAD') return 'HeadObject';
  if (method === 'DELETE') return 'DeleteObject';
  return 'Other';
}

export async function startS3FaultProxy(s3: S3ServerHandle, opts: S3FaultProxyOptions = {}): Promise<S3FaultProxy> {
  const requests: ProxiedRequest[] = [];

  const forward = (req: IncomingMessage, res: ServerResponse, r: ProxiedRequest, cutAfter = Infinity, lose = false) => {
    let sent = 0;
    /** writes a piece of the body; past `cutAfter` bytes, the rest is dropped and the connection dies mid-body */
    const send = (c: Buffer) => {
      if (sent > cutAfter) return;
      const room = cutAfter - sent;
      sent += c.length;
      if (sent <= cutAfter) return void res.write(c);
      r.fault = 'truncate';
      res.write(c.subarray(0, room));
      // a moment for the bytes already written to leave first
      setTimeout(() => res.socket?.destroy(), 10);
    };
    const up = request({ host: '127.0.0.1', port: s3.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
      const status = upRes.statusCode!;
      if (lose) {
        const chunks: Buffer[] = [];
        upRes.on('data', (c: Buffer) => chunks.push(c));
        upRes.on('end', () => {
          r.fault = 'answer lost';
          opts.onResponse?.(r, status, Buffer.concat(chunks));
          req.socket.destroy();
        });
        return;
      }
      const chunks: Buffer[] = [];
      if (!opts.onResponse) res.writeHead(status, upRes.headers);
      upRes.on('data', (c: Buffer) => (opts.onResponse ? chunks.push(c) : send(c)));
      upRes.on('end', () => {
        if (opts.onResponse) {
          const body = Buffer.concat(chunks);
          opts.onResponse(r, status, body);
          res.writeHead(status, upRes.headers);
          send(body);
        }
        if (sent <= cutAfter) res.end();
      });
    });
    up.on('error', () => req.socket.destroy());
    req.pipe(up);
  };

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://s3');
    const [, bucket = '', ...key] = decodeURIComponent(url.pathname).split('/');
    const method = req.method ?? 'GET';
    const r: ProxiedRequest = {
      n: requests.length + 1, method, url, bucket, key: key.join('/'), operation: s3OperationOf(method, url), headers: req.headers,
    };
    requests.push(r);
    const f = opts.fault?.(r);
    switch (f?.kind) {
      case undefined:
        return forward(req, res, r);
      case 'truncate':
        return forward(req, res, r, f.afterBytes);
      case 'lose':
        return forward(req, res, r, Infinity, true);
      case 'delay':
        r.fault = 'delay';
        return void setTimeout(() => forward(req, res, r), f.ms);
      case 'hold': {
        r.fault = 'hold';
        // the body is read now (a client that finished sending may then go away); forwarded once released
        const body: Buffer[] = [];
        let complete = false;
        let gone = false;
        req.on('data', (c: Buffer) => body.push(c));
        req.on('end', () => (complete = true));
        res.on('close', () => (gone = !res.writableFinished));
        return void f.until.finally(() => {
          if (gone || !complete) {
            r.fault = 'hold, dropped';
            return;
          }
          const replay = Object.assign(Readable.from(body), { method: req.method, url: req.url, headers: req.headers, socket: req.socket });
          forward(replay as unknown as IncomingMessage, res, r);
        });
      }
      case 'reset':
        r.fault = 'reset';
        return void req.socket.destroy();
      case 'error':
        r.fault = f.code;
        req.resume();
        res.writeHead(f.status, { 'content-type': 'application/xml' });
        return void res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${f.code}</Code><Message>${f.message}</Message></Error>`);
      case 'reply':
        r.fault = `reply ${f.status}`;
        req.resume();
        res.writeHead(f.status);
        return void res.end(f.body);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  const endpoint = `http://127.0.0.1:${port}`;
  let stopped = false;
  return {
    port,
    endpoint,
    settings: { ...s3.settings, endpoint },
    requests,
    async stop() {
      if (stopped) return;
      stopped = true;
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
