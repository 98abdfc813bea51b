// The package as a user gets it: `npm pack` (its prepack builds dist/), the tarball installed into an empty project
// (`npm ci --offline` from npm's cache, see test/helpers/consumer-lockfile.ts), then `kmfleet/producer` imported
// from there enqueues a job on a real redis-server, a TypeScript consumer typechecks against the shipped .d.ts, and
// the installed `kmfleet` command reads the job back.
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyspace } from '../../producer/keys.js';
import { consumerLockfile } from '../helpers/consumer-lockfile.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';

const ROOT = join(import.meta.dirname, '..', '..');
const NPM_ENV = { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false', npm_config_loglevel: 'error' };

let server: RedisServerHandle;
let tmp: string;
let project: string;
let files: string[];
let tarball: string;

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = NPM_ENV): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd, env, timeout: 240_000, maxBuffer: 64 << 20 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

beforeAll(async () => {
  server = await startRedisServer();
  tmp = mkdtempSync(join(tmpdir(), 'kmfleet-pack-'));
  const packed = await run('npm', ['pack', '--json', '--pack-destination', tmp], ROOT);
  expect(packed.code, packed.stderr).toBe(0);
  const [info] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
  files = info.files.map((f) => f.path);
  tarball = join(tmp, info.filename);

  project = join(tmp, 'consumer');
  mkdirSync(project);
  execFileSync('tar', ['-xzf', tarball, '-C', tmp, 'package/package.json']);
  const manifest = JSON.parse(readFileSync(join(tmp, 'package', 'package.json'), 'utf8'));
  const repoLock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
  writeFileSync(join(project, 'package.json'), JSON.stringify({
    name: 'consumer', private: true, type: 'module', dependencies: { kmfleet: `file:${tarball}` },
  }, null, 2));
  writeFileSync(join(project, 'package-lock.json'), JSON.stringify(consumerLockfile(repoLock, manifest, tarball), null, 2));
  const installed = await run('npm', ['ci', '--offline'], project);
  expect(installed.code, installed.stderr).toBe(0);
}, 300_000);

afterAll(async () => {
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('npm pack', () => {
  it('ships the built SDK, the CLI and the README, not the sources, tests or benchmarks', () => {
    for (const f of ['dist/producer/index.js', 'dist/producer/index.d.ts', 'dist/errors/index.js', 'dist/cli/main.js', 'bin/kmfleet.js', 'README.md',
      'package.json', 'producer/README.md', 'dist/dashboard/server.js', 'dashboard/static/index.html']) {
      expect(files, f).toContain(f);
    }
    const stray = files.filter((f) => /^(test|bench|scripts|infra|native|cuda|worker|cli)\//.test(f) ||
      (/\.ts$/.test(f) && !f.endsWith('.d.ts')) || f.endsWith('.map') || /^producer\/[^/]+\.ts$/.test(f));
    expect(stray).toEqual([]);
  });

  it('installs without building native code or fetching build tools', () => {
    const manifest = JSON.parse(readFileSync(join(project, 'node_modules', 'kmfleet', 'package.json'), 'utf8'));
    for (const hook of ['preinstall', 'install', 'postinstall']) expect(manifest.scripts?.[hook], hook).toBeUndefined();
    expect(files).not.toContain('binding.gyp'); // npm would run node-gyp on it
    for (const tool of ['cmake-js', 'node-addon-api', 'node-gyp', 'typescript']) {
      expect(existsSync(join(project, 'node_modules', tool)), tool).toBe(false);
    }
    expect(existsSync(join(project, 'node_modules', 'kmfleet', 'build'))).toBe(false);
  });
});

describe('the installed package', () => {
  it('enqueues a job through kmfleet/producer, and the installed kmfleet command reads it back', async () => {
    writeFileSync(join(project, 'enqueue.mjs'), `
import { KmfleetClient } from 'kmfleet/producer';
const client = new KmfleetClient({ connection: process.argv[2], prefix: 'pkg' });
try {
  const job = await client.enqueue({ dataset: { uri: 's3://data/emb.npy' }, k: 16, output: 's3://out/runs' }, { jobId: 'from-tarball' });
  console.log(JSON.stringify(job));
} finally {
  await client.close();
}
`);
    const r = await run(process.execPath, ['enqueue.mjs', server.url], project);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ id: 'from-tarball', created: true });

    const keys = keyspace({ prefix: 'pkg' });
    const queue = new Queue(keys.queueName, { connection: server.connection, prefix: keys.bullPrefix });
    try {
      const job = await queue.getJob('from-tarball');
      expect(job?.data.spec).toMatchObject({ k: 16, dataset: { uri: 's3://data/emb.npy' }, output: 's3://out/runs' });
    } finally {
      await queue.close();
    }

    const status = await run(join(project, 'node_modules', '.bin', 'kmfleet'),
      ['status', 'from-tarball', '--json', '--redis-url', server.url, '--prefix', 'pkg'], project);
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ id: 'from-tarball', spec: { k: 16 } });
  }, 60_000);

  it('typechecks a TypeScript consumer against the shipped declarations', async () => {
    writeFileSync(join(project, 'consumer.ts'), `
import { KmfleetClient, type JobProgress } from 'kmfleet/producer';
const client = new KmfleetClient({ connection: 'redis://127.0.0.1:6379' });
const show = (p: JobProgress) => p.iteration;
export async function go(): Promise<number> {
  const job = await client.enqueue({ dataset: { uri: 's3://b/x.npy' }, k: 4, output: 's3://b/out' });
  const result = await client.wait(job.id, { onProgress: (p) => show(p) });
  return result.iterations;
}
`);
    writeFileSync(join(project, 'tsconfig.json'), JSON.stringify({
      compilerOptions: {
        module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', strict: true, noEmit: true,
        types: ['node'], typeRoots: [join(ROOT, 'node_modules', '@types')],
      },
      files: ['consumer.ts'],
    }));
    const tsc = await run(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], project);
    expect(tsc.code, tsc.stdout + tsc.stderr).toBe(0);
  }, 120_000);
});
