/**
 * Server-sent events of one job (text/event-stream): `progress` at once and on every change, then one final event —
 * `completed` (the JobResult), `failed`, `cancelled` or `error` — and the stream ends. Built on the SDK's wait, so it
 * sees what `kmfleet wait` sees. A comment line every 15 s keeps proxies from closing a quiet stream (a long
 * iteration); the wait stops when the client goes away.
 */
import type { ServerResponse } from 'node:http';
import type { KmfleetClient } from '../producer/client.js';
import { JobCancelledError, JobFailedError } from '../producer/errors/index.js';
import { toErrorAnswer } from './errors.js';

const HEARTBEAT_MS = 15_000;

export interface EventSink {
  /** Sends one event; false once the client has gone. */
  send(event: string, data: unknown): boolean;
}

/** Writes the headers and streams the job's events into `res` until the job ends or `gone` fires. */
export async function streamJobEvents(
  client: KmfleetClient,
  jobId: string,
  res: ServerResponse,
  gone: AbortSignal,
  headers: Record<string, string>,
  shape: { progress: (p: unknown) => unknown; result: (r: unknown) => unknown },
): Promise<void> {
  res.writeHead(200, {
    ...headers,
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-store',
    Connection: 'keep-alive',
    // nginx and others buffer responses unless told not to; events must reach the client as they happen
    'X-Accel-Buffering': 'no',
  });
  const sink: EventSink = {
    send(event, data) {
      if (gone.aborted || res.writableEnded) return false;
      res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
      return true;
    },
  };
  const heartbeat = setInterval(() => !gone.aborted && !res.writableEnded && res.write(': ping\n\n'), HEARTBEAT_MS);
  try {
    const result = await client.wait(jobId, { signal: gone, onProgress: (progress, state) => sink.send('progress', { state, progress: shape.progress(progress) }) });
    sink.send('completed', shape.result(result));
  } catch (err) {
    if (gone.aborted) return;
    if (err instanceof JobCancelledError) sink.send('cancelled', { id: jobId });
    else if (err instanceof JobFailedError) sink.send('failed', { reason: err.failedReason, attemptsMade: err.attemptsMade });
    else sink.send('error', toErrorAnswer(err).body);
  } finally {
    clearInterval(heartbeat);
    res.end();
  }
}
