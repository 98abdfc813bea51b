/**
 * Maps ioredis' connection-level failures to RedisUnavailableError with a message that names the
 * server (never its password) and says what to check.
 */
import { RedisUnavailableError } from './errors/redis-unavailable-error.js';
import { KmfleetError } from './errors/kmfleet-error.js';

const CONNECTION_FAILURE =
  /ECONNREFUSED|ETIMEDOUT|ENOTFOUND|EHOSTUNREACH|ECONNRESET|EAI_AGAIN|Connection is closed|Stream isn't writeable|enableOfflineQueue|max retries per request|MaxRetriesPerRequest|connect ETIMEDOUT|NOAUTH|WRONGPASS|invalid password|Reached the max retries/i;

export function isConnectionFailure(err: unknown): boolean {
  return err instanceof Error && CONNECTION_FAILURE.test(err.message);
}

export function toRedisUnavailable(err: unknown, where: string): unknown {
  if (err instanceof KmfleetError || !isConnectionFailure(err)) return err;
  const msg = (err as Error).message;
  const hint = /NOAUTH|WRONGPASS|invalid password/i.test(msg)
    ? 'check the password in REDIS_URL'
    : 'is it running? check REDIS_URL';
  return new RedisUnavailableError(`cannot use Redis at ${where}: ${msg} (${hint})`, { cause: err });
}
