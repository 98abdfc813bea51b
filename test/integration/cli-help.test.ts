/**
 * `kmfleet --help` on the compiled CLI: it lists every command with its options, and it loads only the command table
 * (cli/commands/index.ts, cli/options.ts): no command module, no engine, BullMQ, ioredis or AWS SDK. Start-up time
 * itself is measured, not asserted (see the commit that made commands lazy).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureDistBuilt } from '../helpers/dist-build.js';

const root = join(import.meta.dirname, '../..');
const dir = mkdtempSync(join(tmpdir(), 'kmfleet-help-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const COMMANDS = ['fit', 'generate', 'worker', 'demo', 'enqueue', 'status', 'wait', 'cancel', 'schedule', 'schedules', 'unschedule', 'history', 'dashboard', 'api'];

/** Runs bin/kmfleet.js with a module loader hook that lists every module it resolves. */
let runs = 0;
function kmfleetTraced(...args: string[]) {
  const list = join(dir, `loaded-${++runs}.txt`);
  const hooks = join(dir, 'hooks.mjs');
  writeFileSync(hooks, `import { appendFileSync } from 'node:fs';\nexport async function resolve(s, c, next) {\n  const r = await next(s, c);\n  appendFileSync(${JSON.stringify(list)}, r.url + '\\n');\n  return r;\n}\n`);
  const register = `data:text/javascript,import { register } from 'node:module'; register(${JSON.stringify(pathToFileURL(hooks).href)});`;
  writeFileSync(list, '');
  const r = spawnSync(process.execPath, ['--import', register, join(root, 'bin/kmfleet.js'), ...args], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
  const loaded = [...new Set(readFileSync(list, 'utf8').split('\n').filter(Boolean))];
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, loaded };
}

/** what a module URL is: "cli/commands/index" for our dist/ files, the package name for node_modules */
const nameOf = (url: string) =>
  url.includes('/node_modules/')
    ? url.split('/node_modules/').pop()!.split('/').slice(0, url.split('/node_modules/').pop()!.startsWith('@') ? 2 : 1).join('/')
    : url.replace(/^.*\/dist\//, '').replace(/\.js$/, '');

beforeAll(() => ensureDistBuilt(), 180_000);

describe('kmfleet --help', () => {
  it('lists every command', () => {
    const r = kmfleetTraced('--help');
    expect(r.code, r.stderr).toBe(0);
    const listed = [...r.stdout.matchAll(/^ {2}(\w+) /gm)].map((m) => m[1]).filter((c) => c !== 'help');
    expect(listed).toEqual(COMMANDS);
    // scripts tell the outcomes of `kmfleet wait` apart by these
    expect(r.stdout).toMatch(/Exit codes:\n {4}0 +done[^]*\n {4}1 +failed[^]*\n {4}2 +bad input[^]*\n {4}3 +could not use Redis[^]*\n {4}4 +timed out waiting/);
  });

  it('loads the command table only: no command module, engine, queue or S3 code', () => {
    const r = kmfleetTraced('--help');
    const ours = r.loaded.filter((u) => u.includes('/dist/')).map(nameOf).sort();
    // errors/: the root class that the exit status is read from, with no dependency; cli/tracing: bin/kmfleet.js asks
    // it whether OTEL_* wants traces (it loads the OpenTelemetry SDK only then)
    expect(ours).toEqual(['cli/commands/index', 'cli/main', 'cli/options', 'cli/tracing', 'errors/exit-status', 'errors/index', 'errors/kmfleet-error',
      'errors/kmfleet-input-error', 'producer/errors/job-errors', 'producer/keys', 'producer/spec-vocabulary']);
    const packages = new Set(r.loaded.filter((u) => u.includes('/node_modules/')).map(nameOf));
    expect([...packages]).toEqual(['commander']);
  });

  it('--version prints the package version', () => {
    const r = kmfleetTraced('--version');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version}\n`);
  });

  it('an option error is one kmfleet: error line pointing at the help, exit 2', () => {
    const cases: [string[], string][] = [
      [['status'], "kmfleet: error: missing required argument 'jobId' (see kmfleet status --help)\n"],
      [['enqueue', '--nope'], "kmfleet: error: unknown option '--nope' (Did you mean --name?) (see kmfleet enqueue --help)\n"],
      [['fit', '--input', 'x.npy', '--k', 'two', '--out', 'o'],
        "kmfleet: error: option '--k <n>' argument 'two' is invalid. --k must be a positive integer (see kmfleet fit --help)\n"],
      [['statsu'], "kmfleet: error: unknown command 'statsu' (Did you mean status?) (see kmfleet --help)\n"],
      [['--redis-url'], "kmfleet: error: option '--redis-url <url>' argument missing (see kmfleet --help)\n"],
    ];
    for (const [args, stderr] of cases) {
      const r = kmfleetTraced(...args);
      expect(r, args.join(' ')).toMatchObject({ code: 2, stdout: '', stderr });
    }
  });

  it('a command\'s help shows its options without loading it; running it loads it', () => {
    const help = kmfleetTraced('fit', '--help');
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/--input <file>/);
    expect(help.stdout).toMatch(/--json/);
    expect(help.loaded.map(nameOf)).not.toContain('cli/commands/fit');
    const bad = kmfleetTraced('fit', '--input', join(dir, 'missing.npy'), '--k', '2', '--out', join(dir, 'out'));
    expect(bad.code).toBe(2); // a missing input file is bad input
    expect(bad.stderr).toMatch(/missing\.npy/);
    expect(bad.loaded.map(nameOf)).toContain('cli/commands/fit');
    expect(bad.loaded.map(nameOf)).not.toContain('cli/commands/enqueue');
  });
});
