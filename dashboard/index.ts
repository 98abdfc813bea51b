/**
 * `kmfleet/dashboard`: the dashboard for apps of one's own — the fastify plugin (mount it under any prefix), the
 * stand-alone server `kmfleet dashboard` runs, and the Host check the plugin takes as `hosts`.
 */
export { DASHBOARD_ACTIONS, dashboardPlugin, type DashboardAction, type DashboardPluginOptions } from './plugin.js';
export { startDashboard, type DashboardOptions, type DashboardServer } from './server.js';
export { hostAllowance, type HostAllowance } from '../producer/allowed-hosts.js';
export type { JobPage, JobRow, QueueSnapshot, QueueState } from './snapshot.js';
