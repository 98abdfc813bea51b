/**
 * What every queue command's action shares: a client from the connection flags (cli/options.ts) and the environment
 * (--redis-url, else REDIS_URL; REDIS_CLUSTER_NODES for a Redis Cluster; --prefix / KMFLEET_PREFIX; --queue / KMFLEET_QUEUE) that is always closed, and the
 * mapping of the SDK's input errors to the CLI's exit code 2.
 */
import { KmfleetClient } from '../../producer/client.js';
import { connectionFromEnv } from '../../producer/connection.js';
import { KmfleetInputError } from '../../producer/errors/kmfleet-error.js';
import type { ConnectionFlags } from '../options.js';

/** A client from the flags and the environment; closed when `fn` settles. */
export async function withClient<T>(flags: ConnectionFlags, fn: (client: KmfleetClient) => Promise<T>): Promise<T> {
  const client = new KmfleetClient({
    connection: connectionFromEnv(process.env, flags.redisUrl),
    prefix: flags.prefix ?? (process.env.KMFLEET_PREFIX || undefined),
    queue: flags.queue ?? (process.env.KMFLEET_QUEUE || undefined),
    connectTimeoutMs: Number(process.env.KMFLEET_REDIS_CONNECT_TIMEOUT_MS) || 5000,
  });
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/**
 * Wraps an action: the SDK's input errors (bad spec, bad job id, bad REDIS_URL...) leave as `UsageError`,
 * which cli/main.ts maps to exit code 2; everything else keeps its name (exit 1).
 */
export function cliAction<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      if (err instanceof KmfleetInputError) {
        const usage = new Error(err.message, { cause: err });
        usage.name = 'UsageError';
        throw usage;
      }
      throw err;
    }
  };
}

/** An error that cli/main.ts reports with exit code 1 (a failure, not bad input). */
export class CommandFailure extends Error {
  override name = 'CommandFailure';
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value) + '\n');
}
