/**
 * The `kmfleet` CLI: builds the commander program from cli/commands/index.ts and maps failures to exit codes:
 *   0 success · 1 failure (the job failed or was cancelled, engine, device, I/O, a bug) · 2 bad input (options, dataset,
 *   spec, centroids) · 3 Redis could not be used · 4 timed out waiting (the job goes on) · 130 interrupted
 * An error is one line on stderr: "kmfleet: error: <message>" — commander's own (a bad option) included.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { EXIT_STATUS, KmfleetError } from '../errors/index.js';
import { defineCommands } from './commands/index.js';

/** The version in the package.json of the package this file belongs to (from cli/ or dist/cli/). */
function packageVersion(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
    if (pkg.name === 'kmfleet') return pkg.version ?? 'unknown';
  }
  return 'unknown';
}

/** commander's "error: …" (sometimes with a "(Did you mean …?)" line) as kmfleet's one line, with a pointer to help. */
function oneLine(cmd: Command) {
  const help = cmd.parent ? `kmfleet ${cmd.name()} --help` : 'kmfleet --help';
  return (text: string, write: (s: string) => void) => {
    const msg = text.trim().replace(/^error: /, '').replace(/\s*\n\s*/g, ' ');
    write(`kmfleet: error: ${msg} (see ${help})\n`);
  };
}

export function buildProgram(): Command {
  const program = new Command('kmfleet')
    .description('exact k-means on GPU workers: fit local files, generate datasets, run and feed the fleet')
    .version(packageVersion(), '-V, --version', 'print the version')
    .addHelpText('after', `\n${EXIT_CODES_HELP}`)
    .exitOverride();
  program.configureOutput({ outputError: oneLine(program) });
  defineCommands(program);
  for (const cmd of program.commands) {
    cmd.exitOverride();
    cmd.configureOutput({ outputError: oneLine(cmd) });
  }
  return program;
}

export const EXIT_CODES_HELP = `Exit codes:
    0    done (wait: the job completed)
    1    failed: the job failed, was cancelled or is not found; a local fit failed
    2    bad input: options, spec, dataset file
    3    could not use Redis: down, refused, wrong password, TLS (the job's fate is unknown)
    4    timed out waiting (--timeout): the job goes on
    130  interrupted`;

/** File errors, in words: Node's own messages read "ENOENT: no such file or directory, open '…'". */
const FILE_ERRORS: Record<string, string> = {
  ENOENT: 'no such file or directory',
  EISDIR: 'is a directory',
  ENOTDIR: 'not a directory',
  EEXIST: 'already exists',
  EACCES: 'permission denied',
};

/** Our errors exit with the status of their code (errors/exit-status.ts); a file that cannot be read is bad input. */
export function exitCodeOf(err: unknown): number {
  if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
  if (err instanceof KmfleetError) return EXIT_STATUS[err.code];
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && Object.hasOwn(FILE_ERRORS, code) ? 2 : 1;
}

export function messageOf(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  if (e instanceof Error && e.code && e.code in FILE_ERRORS && e.path && e.message.startsWith(`${e.code}:`)) {
    return `${e.path}: ${FILE_ERRORS[e.code]}`;
  }
  return (err instanceof Error ? err.message : String(err)).split('\n')[0];
}

export async function main(argv: string[] = process.argv): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    const code = exitCodeOf(err);
    // commander already printed its own usage errors (and help/version output)
    if (!(err instanceof CommanderError)) {
      process.stderr.write(`kmfleet: error: ${messageOf(err)}\n`);
      if (code === 1 && process.env.KMFLEET_DEBUG && err instanceof Error) process.stderr.write(`${err.stack}\n`);
    }
    return code;
  }
}
