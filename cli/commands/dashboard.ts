/**
 * `kmfleet dashboard`: a small web page to watch the queue (counts, jobs page by page, schedules) and each job's
 * progress and convergence curve, served by dashboard/server.ts until SIGINT/SIGTERM. Read-only unless
 * --allow-actions (cancel, retry, remove, promote).
 */
import type { ConnectionFlags } from '../options.js';
import { cliAction, withClient } from './connection.js';

interface DashboardFlags extends ConnectionFlags {
  port: string;
  host: string;
  allowedHost?: string[];
  allowActions?: boolean;
}

export const action = cliAction(async (flags: DashboardFlags) => {
  const port = Number(flags.port);
  if (!/^\d+$/.test(flags.port) || port > 65535) {
    throw Object.assign(new Error(`--port must be 0..65535 (got ${flags.port})`), { name: 'UsageError' });
  }
  await withClient(flags, async (client) => {
    await client.connect(); // a down Redis is one clear error now, not an empty page later
    const { startDashboard } = await import('../../dashboard/server.js');
    const actions = Boolean(flags.allowActions);
    const dash = await startDashboard({ client, host: flags.host, port, actions, allowedHosts: flags.allowedHost });
    process.stderr.write(`kmfleet dashboard: ${dash.url} (Redis ${client.where}${actions ? ', actions on' : ''})\n`);
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await dash.close();
  });
});
