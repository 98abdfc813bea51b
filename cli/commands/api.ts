/**
 * `kmfleet api`: the HTTP API for producers in any language (api/server.ts) until SIGINT/SIGTERM. Redis, prefix and
 * queue as every queue command; the bearer token from KMFLEET_API_TOKEN or KMFLEET_API_TOKEN_FILE; S3 settings (for
 * presigned output URLs) as a worker's (KMFLEET_S3_*, AWS_*); request log as JSON lines on stdout (KMFLEET_LOG_LEVEL).
 */
import { KmfleetInputError } from '../../errors/index.js';
import type { ConnectionFlags } from '../options.js';
import { cliAction, withClient } from './connection.js';

interface ApiFlags extends ConnectionFlags {
  port: string;
  host: string;
  allowedHost?: string[];
}

export const action = cliAction(async (flags: ApiFlags) => {
  const port = Number(flags.port);
  if (!/^\d+$/.test(flags.port) || port > 65535) {
    throw new KmfleetInputError(`--port must be 0..65535 (got ${flags.port})`);
  }
  const { tokenFromEnv } = await import('../../api/token.js');
  const token = tokenFromEnv();
  const [{ startApi }, { createS3, s3SettingsFromEnv }, { createLogger }] = await Promise.all([
    import('../../api/server.js'),
    import('../../worker/s3/client.js'),
    import('../../worker/logger.js'),
  ]);
  await withClient(flags, async (client) => {
    await client.connect(); // a down Redis is one clear error now, not a 503 on every request
    const s3 = createS3(s3SettingsFromEnv());
    const logger = createLogger({ name: 'kmfleet-api', level: process.env.KMFLEET_LOG_LEVEL || 'info' });
    try {
      const api = await startApi({ client, host: flags.host, port, token, allowedHosts: flags.allowedHost ?? [], s3, logger });
      process.stderr.write(`kmfleet api: ${api.url} (Redis ${client.where}, ${token ? 'bearer token required' : 'no token: loopback only'})\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      await api.close();
    } finally {
      s3.destroy();
    }
  });
});
