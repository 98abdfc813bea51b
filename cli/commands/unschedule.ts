/** `kmfleet unschedule NAME`: remove a recurring job (jobs it already made are not touched). */
import type { ConnectionFlags } from '../options.js';
import { cliAction, CommandFailure, printJson, withClient } from './connection.js';

export const action = cliAction(async (name: string, flags: ConnectionFlags) => {
  const removed = await withClient(flags, (c) => c.unschedule(name));
  if (flags.json) {
    printJson({ name, removed });
    if (!removed) process.exitCode = 1;
  } else if (!removed) throw new CommandFailure(`no schedule named ${name}`);
  else process.stdout.write(`unscheduled ${name}\n`);
});
