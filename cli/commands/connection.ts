/**
 * What every queue command's action shares: a client from the connection flags (cli/options.ts) and the environment
 * (--redis-url, else REDIS_URL; REDIS_CLUSTER_NODES for a Redis Cluster; --prefix / KMFLEET_PREFIX; --queue / KMFLEET_QUEUE) that is always closed.
 */
import { KmfleetClient } from '../../producer/client.js';
import { connectionFromEnv } from '../../producer/connection.js';
import { KmfleetError, KmfleetInputError } from '../../errors/index.js';
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
 * Wraps an action: a plain Error named 'UsageError' leaves as a KmfleetInputError (exit code 2); every error of
 * ours already carries its exit status in its code (cli/main.ts).
 */
export function cliAction<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      if (err instanceof Error && !(err instanceof KmfleetError) && err.name === 'UsageError') {
        throw new KmfleetInputError(err.message, { cause: err });
      }
      throw err;
    }
  };
}

/** What a command could not do (no such job, no such schedule): exit code 1, a failure, not bad input. */
export class CommandFailure extends KmfleetError {
  readonly code = 'COMMAND_FAILED';
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value) + '\n');
}
