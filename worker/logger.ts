/**
 * The worker's logger: pino, JSON lines to stdout. Every line about a job comes from a child logger that carries the
 * job id and attempt (jobLogger), so one grep follows a job across pods and restarts; every line names its host (the
 * pod), and with tracing on a line written inside a span carries its trace_id and span_id. Credentials never reach a
 * line: known secret fields are redacted, and Redis URLs are logged only through redactRedisUrl.
 */
import { hostname } from 'node:os';
import { pino, type Logger, type LoggerOptions } from 'pino';
import { traceLogFields } from '../producer/telemetry.js';

export type { Logger } from 'pino';

export const REDACT_PATHS = [
  'password',
  '*.password',
  'redis.password',
  'secretAccessKey',
  '*.secretAccessKey',
  '*.*.secretAccessKey',
  'sessionToken',
  '*.sessionToken',
  '*.*.sessionToken',
  'credentials',
  '*.credentials',
  'authorization',
  '*.authorization',
  'headers.authorization',
];

export function createLogger(opts: { level?: string; name?: string; destination?: NodeJS.WritableStream } = {}): Logger {
  const options: LoggerOptions = {
    name: opts.name ?? 'kmfleet-worker',
    level: opts.level ?? 'info',
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    base: { pid: process.pid, hostname: hostname() },
    mixin: traceLogFields,
  };
  return opts.destination ? pino(options, opts.destination as pino.DestinationStream) : pino(options);
}

/** The logger for one attempt of one job: `jobId` and `attempt` (1-based) on every line. */
export function jobLogger(parent: Logger, jobId: string, attempt: number): Logger {
  return parent.child({ jobId, attempt });
}
