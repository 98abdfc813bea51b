/** `kmfleet unschedule NAME`: remove a recurring job (jobs it already made are not touched). */
import type { Command } from 'commander';
import { addConnectionOptions, cliAction, CommandFailure, printJson, withClient, type ConnectionFlags } from './connection.js';

export function registerUnschedule(program: Command): void {
  addConnectionOptions(
    program.command('unschedule').description('remove a recurring job').argument('<name>', 'schedule name'),
  ).action(
    cliAction(async (name: string, flags: ConnectionFlags) => {
      const removed = await withClient(flags, (c) => c.unschedule(name));
      if (flags.json) {
        printJson({ name, removed });
        if (!removed) process.exitCode = 1;
      } else if (!removed) throw new CommandFailure(`no schedule named ${name}`);
      else process.stdout.write(`unscheduled ${name}\n`);
    }),
  );
}
