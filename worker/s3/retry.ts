/**
 * Retries with exponential backoff and full jitter around whole S3 operations, reads and writes alike, for as long as
 * a time budget lasts rather than a fixed count: the SDK's own retries (standard mode) are spent in about a second,
 * and an S3 blip of a few seconds during a checkpoint or the final upload must not cost the job a BullMQ attempt.
 * A ranged GET whose body breaks mid-stream fails AFTER the SDK handed us the response: only these retries cover it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { S3ObjectChangedError, S3ObjectNotFoundError } from './errors.js';

export interface RetryPolicy {
  /** no retry starts once this long has passed since the first try (ms) */
  budgetMs: number;
  /** first backoff ceiling in ms; doubles each attempt */
  baseMs: number;
  /** largest backoff ceiling in ms */
  maxMs: number;
  /** an optional cap on total attempts, first included (tests use it to fail fast) */
  attempts?: number;
}

export const DEFAULT_RETRY: RetryPolicy = { budgetMs: 60_000, baseMs: 100, maxMs: 5_000 };

const RETRYABLE_NAMES = new Set([
  'SlowDown',
  'Throttling',
  'ThrottlingException',
  'RequestTimeout',
  'RequestTimeoutException',
  'InternalError',
  'ServiceUnavailable',
  'TimeoutError',
  'S3ShortReadError',
]);
const RETRYABLE_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'ERR_STREAM_PREMATURE_CLOSE',
  'UND_ERR_SOCKET',
  'S3_SHORT_READ',
]);

/** Worth another try: server-side 5xx, throttling, resets and truncated bodies. Never 4xx, never a changed object. */
export function isRetryableS3Error(err: unknown): boolean {
  if (err instanceof S3ObjectChangedError || err instanceof S3ObjectNotFoundError) return false;
  if (!err || typeof err !== 'object') return false;
  const e = err as { name?: string; code?: string; $metadata?: { httpStatusCode?: number }; $retryable?: unknown; message?: string };
  const status = e.$metadata?.httpStatusCode;
  if (status !== undefined && status >= 500) return true;
  if (status === 429) return true;
  if (e.name && RETRYABLE_NAMES.has(e.name)) return true;
  if (e.code && RETRYABLE_CODES.has(e.code)) return true;
  if (e.$retryable) return true;
  if (status !== undefined && status >= 400) return false;
  return /socket hang up|premature close|aborted|ECONNRESET/i.test(e.message ?? '');
}

/** Full jitter: a uniform wait in [0, min(maxMs, baseMs·2^attempt)). */
export function backoffMs(attempt: number, policy: RetryPolicy, random: () => number = Math.random): number {
  const ceiling = Math.min(policy.maxMs, policy.baseMs * 2 ** attempt);
  return Math.floor(random() * ceiling);
}

export async function withRetries<T>(
  fn: (attempt: number) => Promise<T>,
  policy: RetryPolicy = DEFAULT_RETRY,
  opts: { signal?: AbortSignal; onRetry?: (err: unknown, attempt: number, waitMs: number) => void } = {},
): Promise<T> {
  const started = Date.now();
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (!isRetryableS3Error(err) || opts.signal?.aborted) throw err;
      if (policy.attempts !== undefined && attempt + 1 >= policy.attempts) throw err;
      const wait = backoffMs(attempt, policy);
      if (Date.now() - started + wait > policy.budgetMs) throw err;
      opts.onRetry?.(err, attempt + 1, wait);
      await sleep(wait, undefined, opts.signal ? { signal: opts.signal } : undefined);
    }
  }
}
