/**
 * One error root: every error class that a product module exports descends from errors/'s KmfleetError, carries a
 * code of errors/exit-status.ts and its own class name, and the CLI's exit status (cli/main.ts) is the one of its
 * code. The classes are found by importing every module of the TypeScript layers, so a new one is checked too.
 */
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CommanderError } from 'commander';
import { exitCodeOf } from '../../cli/main.js';
import { EXIT_STATUS, KmfleetError, KmfleetInputError } from '../../errors/index.js';
import { EngineError } from '../../native/index.js';

const ROOT = join(import.meta.dirname, '..', '..');
const LAYERS = ['errors', 'producer', 'core', 'worker', 'native', 'cli', 'api', 'dashboard'];

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...(name === 'node_modules' || name === 'static' ? [] : tsFiles(p)));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

type ErrorClass = abstract new (...args: never[]) => Error;
const isErrorClass = (v: unknown): v is ErrorClass => typeof v === 'function' && v.prototype instanceof Error;

/** Every exported error class of the product, by name, with the module that exports it. */
async function exportedErrorClasses(): Promise<Map<ErrorClass, string>> {
  const found = new Map<ErrorClass, string>();
  for (const file of LAYERS.flatMap((l) => tsFiles(join(ROOT, l)))) {
    const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    for (const value of Object.values(mod)) {
      if (isErrorClass(value) && !found.has(value)) found.set(value, relative(ROOT, file));
    }
  }
  return found;
}

/** Constructor arguments a class needs beyond a message. */
const ARGS: Record<string, unknown[]> = {
  SpecValidationError: [[{ path: 'k', message: 'must be an integer' }]],
  HttpError: [400, 'bad request'],
  DashboardHttpError: [403, 'cancel is off'],
};
/** The bases that declare `code` without giving one (abstract in TypeScript). */
const isAbstract = (cls: ErrorClass) => cls === KmfleetError || cls === EngineError;

describe('one error root', () => {
  it('every exported error class descends from KmfleetError, with its name and a code the CLI maps', async () => {
    const classes = await exportedErrorClasses();
    const names = [...classes.keys()].map((c) => c.name);
    // the walk found the classes of every layer (a broken walk must not pass by finding nothing)
    for (const n of ['KmfleetError', 'SpecValidationError', 'WaitTimeoutError', 'KmeansSpecError', 'DatasetFormatError',
      'FencedError', 'S3ObjectChangedError', 'JobInputError', 'WorkerConfigError', 'EngineError', 'InvalidArgumentError',
      'CommandFailure', 'HttpError', 'TokenConfigError']) {
      expect(names, n).toContain(n);
    }
    const problems: string[] = [];
    for (const [cls, file] of classes) {
      if (!(cls.prototype instanceof KmfleetError) && cls !== KmfleetError) {
        problems.push(`${cls.name} (${file}) does not descend from KmfleetError`);
        continue;
      }
      if (isAbstract(cls)) continue;
      const err = new (cls as unknown as new (...a: unknown[]) => KmfleetError)(...(ARGS[cls.name] ?? ['something is wrong']));
      if (err.name !== cls.name) problems.push(`${cls.name} (${file}) is named ${err.name}`);
      if (!err.message) problems.push(`${cls.name} (${file}) has no message`);
      if (!Object.hasOwn(EXIT_STATUS, err.code)) problems.push(`${cls.name} (${file}) has code ${String(err.code)}, not one of errors/exit-status.ts`);
      if (exitCodeOf(err) !== EXIT_STATUS[err.code] || err.exitCode !== EXIT_STATUS[err.code]) problems.push(`${cls.name}: exit status is not its code's`);
      if (err instanceof KmfleetInputError && exitCodeOf(err) !== 2) problems.push(`${cls.name} is bad input but exits ${exitCodeOf(err)}`);
    }
    expect(problems).toEqual([]);
  });

  it('no two error classes share a name', async () => {
    const seen = new Map<string, string>();
    const twice: string[] = [];
    for (const [cls, file] of await exportedErrorClasses()) {
      const other = seen.get(cls.name);
      if (other !== undefined) twice.push(`${cls.name}: ${other} and ${file}`);
      seen.set(cls.name, file);
    }
    expect(twice).toEqual([]);
  });
});

describe("the CLI's exit status", () => {
  it('is the one of the error code, whatever the class', () => {
    class Late extends KmfleetError {
      readonly code = 'WAIT_TIMEOUT';
    }
    class Unreachable extends KmfleetError {
      readonly code = 'REDIS_UNAVAILABLE';
    }
    class Interrupted extends KmfleetError {
      readonly code = 'ABORTED';
    }
    expect(exitCodeOf(new Late('x'))).toBe(4);
    expect(exitCodeOf(new Unreachable('x'))).toBe(3);
    expect(exitCodeOf(new Interrupted('x'))).toBe(130);
    expect(exitCodeOf(new KmfleetInputError('--port must be 0..65535'))).toBe(2);
  });

  it('maps the outcomes a script tells apart', async () => {
    const { JobFailedError, RedisUnavailableError, WaitTimeoutError, SpecValidationError, ArgumentError } = await import('../../producer/errors/index.js');
    const { KmeansAbortedError, DatasetFormatError } = await import('../../core/index.js');
    const { NonFiniteInputError, DeviceError } = await import('../../native/index.js');
    expect(exitCodeOf(new JobFailedError('j', 'boom', 3))).toBe(1);
    expect(exitCodeOf(new RedisUnavailableError('cannot use Redis'))).toBe(3);
    expect(exitCodeOf(new WaitTimeoutError('j', 10, 'active'))).toBe(4);
    expect(exitCodeOf(new SpecValidationError([{ path: 'k', message: 'bad' }]))).toBe(2);
    expect(exitCodeOf(new ArgumentError('job id'))).toBe(2);
    expect(exitCodeOf(new KmeansAbortedError(undefined))).toBe(130);
    expect(exitCodeOf(new DatasetFormatError('not an npy file'))).toBe(2);
    expect(exitCodeOf(new NonFiniteInputError('row 3 is NaN', 3))).toBe(2);
    expect(exitCodeOf(new DeviceError('device lost'))).toBe(1);
  });

  it('maps what is not ours: usage errors of commander 2, unreadable files 2, anything else 1', () => {
    expect(exitCodeOf(new CommanderError(1, 'commander.unknownOption', 'unknown option'))).toBe(2);
    expect(exitCodeOf(new CommanderError(0, 'commander.helpDisplayed', '(help)'))).toBe(0);
    expect(exitCodeOf(Object.assign(new Error('ENOENT: no such file'), { code: 'ENOENT' }))).toBe(2);
    expect(exitCodeOf(Object.assign(new Error('odd'), { code: 'toString' }))).toBe(1);
    expect(exitCodeOf(new Error('a bug'))).toBe(1);
    expect(exitCodeOf('a string')).toBe(1);
  });
});
