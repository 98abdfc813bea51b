/** `kmfleet schedules`: the recurring jobs, one paragraph each (formatted as `kmfleet schedule` reports one). */
import type { ConnectionFlags } from '../options.js';
import { cliAction, printJson, withClient } from './connection.js';
import { formatSchedule } from './schedule.js';

export const action = cliAction(async (flags: ConnectionFlags) => {
  const list = await withClient(flags, (c) => c.schedules());
  if (flags.json) printJson(list);
  else if (list.length === 0) process.stdout.write('no schedules\n');
  else process.stdout.write(list.map(formatSchedule).join('\n') + '\n');
});
