/**
 * Ranged GETs whose body lands straight in the caller's buffer: the S3 client's request handler, wrapped. A GET sent
 * with a `DirectBody` in its handler options (readRangeInto does this) to a plain-HTTP endpoint goes out on its own socket, and
 * once the answer's head says "2xx, exactly the bytes asked for" the socket reads into the target itself (Node's
 * `onread` with the target as the read buffer): the kernel copies the body into place, and nothing else touches it.
 *
 * Why: through Node's HTTP client every socket read is a fresh Buffer that goes through the HTTP parser, a Readable and
 * an async iterator before we copy it into place, and 128 MB of short-lived socket Buffers trigger a mark-compact GC
 * every ~10 MB ("external memory pressure"): several times the client CPU of a direct read (bench/RESULTS.md,
 * Pipeline), CPU the download shares with the engine.
 *
 * Everything else is the SDK's: the request as its middleware built and signed it (SigV4 headers, query, endpoint),
 * its retries around this handler, its parsing of the answer's headers (ETag…), and its error deserialization: an
 * answer that is not the direct case (an error status, a length other than asked, an ETag other than pinned, a
 * checksum header the SDK would validate) is read whole and handed back as an ordinary body stream. Requests without a DirectBody go to the
 * SDK's own handler, and so do https endpoints (AWS S3 itself): Node's TLS sockets take `onread` too, but the SDK's
 * https agent settings would have to be carried over, which is not done yet. Off with KMFLEET_S3_DIRECT_READS=0.
 */
import { connect as netConnect } from 'node:net';
import { Readable } from 'node:stream';
import { S3ShortReadError } from './errors.js';

/** Where a GET's body goes; the handler sets `written` when it put the body there itself. */
export interface DirectBody {
  target: Uint8Array;
  offset: number;
  length: number;
  onProgress?: (bytes: number) => void;
  /**
   * the ETag the object was opened with: an answer with another one is not taken direct (no byte of it lands in target,
   * no progress is reported), so the caller sees the change before any row of the new version is served
   */
  etag?: string;
  /** set by the handler: bytes of the body now in target (= length); undefined = the body is in the response stream */
  written?: number;
}

/** The handler option readRangeInto passes with a GET (through S3Client.send's options). */
export const DIRECT_BODY = 'kmfleetDirectBody';

/** The parts of a Smithy HttpRequest this handler reads. */
interface Request {
  method: string;
  protocol: string;
  hostname: string;
  port?: number;
  path: string;
  query?: Record<string, string | string[] | null>;
  headers: Record<string, string>;
  body?: unknown;
}
interface Response {
  response: { statusCode: number; reason?: string; headers: Record<string, string>; body: Readable };
}
interface HandlerOptions {
  abortSignal?: AbortSignal;
  requestTimeout?: number;
  [DIRECT_BODY]?: DirectBody;
}
/** The SDK's request handler as this wrapper uses it (structural: no import of @smithy internals). */
export interface InnerHandler {
  handle(request: Request, options?: HandlerOptions): Promise<Response>;
  destroy?(): void;
  updateHttpClientConfig?(key: never, value: never): void;
  httpHandlerConfigs?(): unknown;
  metadata?: unknown;
}

export interface DirectReadSettings {
  connectionTimeoutMs: number;
  /** socket inactivity limit, as the SDK handler's requestTimeout */
  requestTimeoutMs: number;
}

/** A head longer than this is not an S3 answer */
const MAX_HEAD_BYTES = 64 * 1024;
/** An error body longer than this is cut (the SDK only needs its code and message) */
const MAX_OTHER_BODY_BYTES = 32 * 1024 * 1024;

export class DirectReadHandler {
  readonly metadata: unknown;

  constructor(
    private readonly inner: InnerHandler,
    private readonly settings: DirectReadSettings,
  ) {
    this.metadata = inner.metadata;
  }

  handle(request: Request, options: HandlerOptions = {}): Promise<Response> {
    const into = options[DIRECT_BODY];
    // plain HTTP only (s3rver, MinIO in the cluster): TLS endpoints keep the SDK's https agent and its settings
    if (!into || request.method !== 'GET' || request.protocol !== 'http:' || (request.body !== undefined && request.body !== null)) {
      return this.inner.handle(request, options);
    }
    return directGet(request, into, options.abortSignal, {
      connectionTimeoutMs: this.settings.connectionTimeoutMs,
      requestTimeoutMs: options.requestTimeout ?? this.settings.requestTimeoutMs,
    });
  }

  updateHttpClientConfig(key: never, value: never): void {
    this.inner.updateHttpClientConfig?.(key, value);
  }

  httpHandlerConfigs(): unknown {
    return this.inner.httpHandlerConfigs?.() ?? {};
  }

  destroy(): void {
    this.inner.destroy?.();
  }
}

function escapeUri(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** The request line's query, as the SDK's handler writes it. */
function queryString(query: Request['query']): string {
  if (!query) return '';
  const parts: string[] = [];
  for (const key of Object.keys(query)) {
    const value = query[key];
    const k = escapeUri(key);
    if (Array.isArray(value)) for (const v of value) parts.push(`${k}=${escapeUri(v)}`);
    else parts.push(value === null || value === undefined ? k : `${k}=${escapeUri(value)}`);
  }
  return parts.length ? `?${parts.join('&')}` : '';
}

function namedError(message: string, name: string, code?: string): Error {
  return Object.assign(new Error(message), { name, ...(code ? { code } : {}) });
}

/** The body comes straight into target only for this: 2xx, the exact length asked, nothing for the SDK to validate. */
function isDirect(status: number, headers: Record<string, string>, into: DirectBody): boolean {
  if (status < 200 || status > 299 || headers['transfer-encoding'] !== undefined) return false;
  if (Number(headers['content-length']) !== into.length) return false;
  if (into.etag !== undefined && headers.etag !== into.etag) return false;
  // a whole-object checksum would be checked by the SDK on the stream: let it (multipart composites "…-N" it skips)
  return !Object.keys(headers).some((h) => h.startsWith('x-amz-checksum-') && h !== 'x-amz-checksum-type' && !/-\d+$/.test(headers[h]));
}

/** The payload of a chunked body read whole (an error answer sent without Content-Length); trailers dropped. */
function dechunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  while (at < raw.length) {
    const eol = raw.indexOf('\r\n', at);
    if (eol < 0) break;
    const size = parseInt(raw.toString('latin1', at, eol).split(';')[0], 16);
    if (!(size > 0)) break;
    parts.push(raw.subarray(eol + 2, Math.min(raw.length, eol + 2 + size)));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

function directGet(
  request: Request,
  into: DirectBody,
  signal: AbortSignal | undefined,
  timeouts: { connectionTimeoutMs: number; requestTimeoutMs: number },
): Promise<Response> {
  into.written = undefined;
  return new Promise<Response>((resolve, reject) => {
    if (signal?.aborted) {
      reject(namedError('Request aborted', 'AbortError'));
      return;
    }
    const host = request.hostname.startsWith('[') && request.hostname.endsWith(']') ? request.hostname.slice(1, -1) : request.hostname;
    const port = request.port ?? 80;
    const scratch = Buffer.allocUnsafe(16 * 1024);
    let next: Uint8Array = scratch;
    let head: Buffer | undefined;
    let mode: 'head' | 'direct' | 'other' | 'done' = 'head';
    let status = 0;
    let reason = '';
    let headers: Record<string, string> = {};
    let got = 0;
    let otherLength = -1; // content-length of an answer read whole; -1: until the connection closes
    const other: Buffer[] = [];
    let settled = false;

    const finish = (err: Error | undefined, response?: Response) => {
      if (settled) return;
      settled = true;
      mode = 'done';
      next = scratch;
      clearTimeout(connectTimer);
      clearInterval(idleTimer);
      signal?.removeEventListener('abort', onAbort);
      socket.destroy();
      if (err) reject(err);
      else resolve(response!);
    };
    const answerOther = () => {
      const raw = Buffer.concat(other);
      const body = /\bchunked\b/i.test(headers['transfer-encoding'] ?? '') ? dechunk(raw) : raw;
      finish(undefined, { response: { statusCode: status, reason, headers, body: Readable.from(body.length ? [body] : []) } });
    };
    const onHead = () => {
      const end = head!.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head!.length > MAX_HEAD_BYTES) finish(new S3ShortReadError(`GET ${request.path}: answer head over ${MAX_HEAD_BYTES} bytes`));
        return;
      }
      const lines = head!.toString('latin1', 0, end).split('\r\n');
      const m = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(lines[0]);
      if (!m) {
        finish(new S3ShortReadError(`GET ${request.path}: not an HTTP answer: ${JSON.stringify(lines[0].slice(0, 80))}`));
        return;
      }
      status = Number(m[1]);
      reason = m[2];
      if (status === 100) {
        head = head!.subarray(end + 4);
        if (head.length > 0) onHead();
        return;
      }
      headers = {};
      for (let i = 1; i < lines.length; i++) {
        const c = lines[i].indexOf(':');
        if (c <= 0) continue;
        const name = lines[i].slice(0, c).trim().toLowerCase();
        const value = lines[i].slice(c + 1).trim();
        headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
      }
      const rest = head!.subarray(end + 4);
      head = undefined;
      if (isDirect(status, headers, into)) {
        mode = 'direct';
        const n = Math.min(rest.length, into.length);
        into.target.set(rest.subarray(0, n), into.offset);
        onBody(n);
        return;
      }
      mode = 'other';
      const cl = headers['content-length'];
      otherLength = cl !== undefined && headers['transfer-encoding'] === undefined ? Number(cl) : -1;
      onOther(rest);
    };
    const onBody = (n: number) => {
      got += n;
      if (n > 0) into.onProgress?.(got);
      if (got >= into.length) {
        into.written = got;
        finish(undefined, { response: { statusCode: status, reason, headers, body: Readable.from([]) } });
        return;
      }
      next = into.target.subarray(into.offset + got, into.offset + into.length);
    };
    const onOther = (bytes: Buffer) => {
      if (bytes.length > 0) other.push(Buffer.from(bytes));
      got += bytes.length;
      if (otherLength >= 0 && got >= otherLength) answerOther();
      else if (got > MAX_OTHER_BODY_BYTES) finish(new S3ShortReadError(`GET ${request.path}: ${status} answer over ${MAX_OTHER_BODY_BYTES} bytes`));
    };

    const onread = {
      buffer: () => next,
      callback: (n: number, buf: Uint8Array) => {
        reads++;
        if (mode === 'head') {
          const bytes = Buffer.from(buf.buffer, buf.byteOffset, n);
          head = head ? Buffer.concat([head, bytes]) : Buffer.from(bytes);
          onHead();
        } else if (mode === 'direct') onBody(n);
        else if (mode === 'other') onOther(Buffer.from(buf.buffer, buf.byteOffset, n));
        return true;
      },
    };
    // one connection per GET, closed after it: a ranged GET moves megabytes, a TCP setup is noise beside that
    const socket = netConnect({ host, port, onread });
    const onAbort = () => finish(namedError('Request aborted', 'AbortError'));
    signal?.addEventListener('abort', onAbort, { once: true });
    const connectTimer = setTimeout(
      () => finish(namedError(`connection to ${host}:${port} timed out after ${timeouts.connectionTimeoutMs} ms`, 'TimeoutError', 'ETIMEDOUT')),
      timeouts.connectionTimeoutMs,
    );
    // inactivity, checked by one timer that compares byte counts: socket.setTimeout would re-arm a timer at every read
    let reads = 0;
    let readsAtTick = -1;
    const idleTimer = setInterval(() => {
      if (reads === readsAtTick) finish(namedError(`no data from ${host}:${port} for ${timeouts.requestTimeoutMs} ms`, 'TimeoutError', 'ETIMEDOUT'));
      readsAtTick = reads;
    }, timeouts.requestTimeoutMs);
    idleTimer.unref();
    socket.once('connect', () => {
      clearTimeout(connectTimer);
      let text = `GET ${request.path}${queryString(request.query)} HTTP/1.1\r\n`;
      let hasHost = false;
      for (const [name, value] of Object.entries(request.headers)) {
        if (name.toLowerCase() === 'host') hasHost = true;
        if (name.toLowerCase() === 'connection') continue;
        text += `${name}: ${value}\r\n`;
      }
      if (!hasHost) text += `host: ${request.hostname}${request.port ? `:${request.port}` : ''}\r\n`;
      socket.write(`${text}connection: close\r\n\r\n`);
    });
    socket.on('error', (err) => finish(err));
    socket.on('end', () => {
      if (mode === 'other' && otherLength < 0) answerOther();
    });
    socket.on('close', () => {
      if (mode === 'other' && otherLength < 0) answerOther();
      // cut before the whole body: our own retry (withRetries) reads the range again
      finish(namedError(`GET ${request.path}: connection closed after ${got} of ${mode === 'direct' ? into.length : 'the'} bytes`, 'S3ShortReadError', 'ECONNRESET'));
    });
  });
}
