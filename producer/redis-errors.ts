/**
 * Maps ioredis' connection-level failures to RedisUnavailableError with a message that names the
 * server (never its password) and says what to check.
 */
import { RedisUnavailableError } from './errors/redis-unavailable-error.js';
import { KmfleetError } from './errors/kmfleet-error.js';

const CONNECTION_FAILURE =
  /ECONNREFUSED|ETIMEDOUT|ENOTFOUND|EHOSTUNREACH|ECONNRESET|EAI_AGAIN|Connection is closed|Stream isn't writeable|enableOfflineQueue|max retries per request|MaxRetriesPerRequest|connect ETIMEDOUT|NOAUTH|WRONGPASS|invalid password|Reached the max retries|Failed to refresh slots cache|None of startup nodes|CLUSTERDOWN/i;

export function isConnectionFailure(err: unknown): boolean {
  return err instanceof Error && CONNECTION_FAILURE.test(err.message);
}

const TLS_FAILURE = /certificate|self-signed|SSL|TLS|CERT_|ERR_TLS|wrong version number/i;

function hintFor(msg: string): string {
  if (/NOAUTH|WRONGPASS|invalid password/i.test(msg)) return 'check the password in REDIS_URL';
  if (TLS_FAILURE.test(msg)) return 'TLS: trust the server\'s CA with NODE_EXTRA_CA_CERTS, or check rediss:// vs redis://';
  if (/slots cache|startup nodes|CLUSTERDOWN/i.test(msg)) return 'is the cluster up? check REDIS_CLUSTER_NODES';
  return 'is it running? check REDIS_URL';
}

/** Connection-level failures become RedisUnavailableError; anything else is returned unchanged. */
export function toRedisUnavailable(err: unknown, where: string, always = false): unknown {
  if (err instanceof KmfleetError) return err;
  if (!always && !isConnectionFailure(err) && !(err instanceof Error && TLS_FAILURE.test(err.message))) return err;
  // A cluster that could not be reached says why only in the last node's error (ioredis ClusterAllFailedError).
  const nodeErr = (err as { lastNodeError?: unknown } | null)?.lastNodeError;
  const msg = (err instanceof Error ? err.message : String(err)) + (nodeErr instanceof Error ? ` (last node: ${nodeErr.message})` : '');
  return new RedisUnavailableError(`cannot use Redis at ${where}: ${msg} (${hintFor(msg)})`, { cause: err });
}
