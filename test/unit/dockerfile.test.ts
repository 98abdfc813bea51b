/**
 * The Dockerfile, checked statically (no Docker engine runs in CI): a small parser of the Dockerfile syntax we
 * use (comments, parser directives, line continuations, exec/JSON form, flags, ARG defaults and ${VAR}
 * substitution in FROM), then assertions on the stages, the pinned bases, the Node download, the user, tini,
 * the health check, and lint-like rules (no latest, apt lists cleaned, COPY --from, .dockerignore allowlist).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEFAULT_METRICS_PORT, HEALTH_PATH } from '../../worker/metrics/index.js';

const ROOT = join(import.meta.dirname, '..', '..');

interface Instruction {
  line: number;
  keyword: string; // upper case
  flags: Record<string, string>; // --from=build → { from: 'build' }
  args: string; // the rest, continuation lines joined with one space
  json: string[] | undefined; // exec form, when args is a JSON array
}
interface Stage {
  base: string; // after ARG substitution
  rawBase: string;
  name: string | undefined;
  instructions: Instruction[];
}
interface Dockerfile {
  globalArgs: Map<string, string | undefined>;
  stages: Stage[];
  all: Instruction[];
}

/** Expand $VAR, ${VAR}, ${VAR:-default} with `vars` (Docker's rule for FROM: only global ARGs are visible). */
function substitute(s: string, vars: Map<string, string | undefined>): string {
  return s.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (_m, a, def, b) => {
    const v = vars.get(a ?? b);
    return v !== undefined && v !== '' ? v : (def ?? '');
  });
}

function unquote(v: string): string {
  return /^(["']).*\1$/.test(v) ? v.slice(1, -1) : v;
}

export function parseDockerfile(text: string): Dockerfile {
  const lines = text.split('\n');
  const all: Instruction[] = [];
  let buf = '';
  let start = 0;
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i];
    const trimmed = raw.trim();
    // comment lines (and parser directives) are dropped, also in the middle of a continued instruction
    if (trimmed.startsWith('#')) continue;
    if (buf === '' && trimmed === '') continue;
    if (buf === '') start = i + 1;
    if (trimmed.endsWith('\\')) {
      buf += trimmed.slice(0, -1).trim() + ' ';
      continue;
    }
    buf += trimmed;
    const m = /^(\S+)\s*(.*)$/s.exec(buf.trim());
    if (!m) throw new Error(`line ${start}: cannot parse '${buf}'`);
    let rest = m[2];
    const flags: Record<string, string> = {};
    const keyword = m[1].toUpperCase();
    // flags come first: --name=value (COPY, ADD, FROM, RUN, HEALTHCHECK)
    for (;;) {
      const f = /^--([a-z-]+)(?:=(\S*))?\s+/.exec(rest);
      if (!f) break;
      flags[f[1]] = f[2] ?? 'true';
      rest = rest.slice(f[0].length);
    }
    let json: string[] | undefined;
    if (rest.startsWith('[')) {
      try {
        const parsed: unknown = JSON.parse(rest);
        if (Array.isArray(parsed) && parsed.every((x) => typeof x === 'string')) json = parsed;
      } catch {
        json = undefined; // shell form that happens to start with [
      }
    }
    all.push({ line: start, keyword, flags, args: rest, json });
    buf = '';
  }
  if (buf !== '') throw new Error('Dockerfile ends inside a continued line');

  const globalArgs = new Map<string, string | undefined>();
  const stages: Stage[] = [];
  for (const ins of all) {
    if (ins.keyword === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args.trim());
      if (!m) throw new Error(`line ${ins.line}: bad FROM '${ins.args}'`);
      stages.push({ rawBase: m[1], base: substitute(m[1], globalArgs), name: m[2], instructions: [] });
    } else if (stages.length === 0) {
      if (ins.keyword !== 'ARG') throw new Error(`line ${ins.line}: ${ins.keyword} before the first FROM`);
      const [name, ...def] = ins.args.split('=');
      globalArgs.set(name.trim(), def.length ? unquote(def.join('=').trim()) : undefined);
    } else {
      stages[stages.length - 1].instructions.push(ins);
    }
  }
  return { globalArgs, stages, all };
}

/** ARG defaults of a stage (name → default). */
function stageArgs(stage: Stage): Map<string, string | undefined> {
  const out = new Map<string, string | undefined>();
  for (const ins of stage.instructions.filter((i) => i.keyword === 'ARG')) {
    const [name, ...def] = ins.args.split('=');
    out.set(name.trim(), def.length ? unquote(def.join('=').trim()) : undefined);
  }
  return out;
}

const text = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
const df = parseDockerfile(text);
const build = df.stages.find((s) => s.name === 'build')!;
const run = df.stages[df.stages.length - 1];
const runs = (s: Stage) => s.instructions.filter((i) => i.keyword === 'RUN').map((i) => i.args);
const last = (s: Stage, kw: string) => [...s.instructions].reverse().find((i) => i.keyword === kw);

describe('the Dockerfile parser', () => {
  it('joins continuations, skips comments inside them, reads flags, exec form and ARG substitution', () => {
    const d = parseDockerfile(
      [
        '# syntax=docker/dockerfile:1',
        'ARG V=1.2',
        'FROM img:${V}-x AS one',
        'RUN a \\',
        '  # a comment in the middle',
        '  && b',
        'COPY --from=one --chown=1:1 /a /b',
        'CMD ["x", "y"]',
        'FROM img:${V:-9} ',
      ].join('\n'),
    );
    expect(d.stages.map((s) => [s.base, s.name])).toEqual([
      ['img:1.2-x', 'one'],
      ['img:1.2', undefined],
    ]);
    const [r, c, cmd] = d.stages[0].instructions;
    expect(r.args).toBe('a && b');
    expect(c.flags).toEqual({ from: 'one', chown: '1:1' });
    expect(c.args).toBe('/a /b');
    expect(cmd.json).toEqual(['x', 'y']);
    expect(() => parseDockerfile('RUN x\nFROM y')).toThrow(/before the first FROM/);
  });
});

describe('Dockerfile', () => {
  it('has two stages: build on the CUDA devel image, run on the CUDA base/runtime image, same CUDA version', () => {
    expect(df.stages.map((s) => s.name)).toEqual(['build', 'run']);
    const dev = /^nvidia\/cuda:(13\.0\.\d+)-devel-ubuntu24\.04@/.exec(build.base);
    const rt = /^nvidia\/cuda:(13\.0\.\d+)-(base|runtime)-ubuntu24\.04@/.exec(run.base);
    expect(dev, build.base).not.toBeNull();
    expect(rt, run.base).not.toBeNull();
    expect(rt![1]).toBe(dev![1]);
  });

  it('pins every base image by tag and digest, never latest, and no ARG without a default in FROM', () => {
    for (const s of df.stages) {
      expect(s.base, s.rawBase).not.toMatch(/\$/);
      expect(s.base).toMatch(/^[\w./-]+:[\w][\w.-]*@sha256:[0-9a-f]{64}$/);
      expect(s.base).not.toMatch(/:latest@/);
    }
    expect(text).not.toMatch(/:latest\b/);
    // two images, two digests (a digest copied to the other FROM would pull the wrong image)
    expect(new Set(df.stages.map((s) => s.base.split('@')[1])).size).toBe(df.stages.length);
  });

  it('installs Node 22 (a maintained LTS) from the official tarball with its SHA-256 checked, within package.json engines', () => {
    const args = stageArgs(build);
    const version = args.get('NODE_VERSION')!;
    expect(version).toMatch(/^22\.\d+\.\d+$/);
    // engines is a list of caret ranges (^major.minor.patch || …): the image's Node is inside one of them
    const engines = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).engines.node as string;
    const ranges = engines.split('||').map((r) => /^\s*\^(\d+)\.(\d+)\.(\d+)\s*$/.exec(r));
    expect(ranges.every(Boolean), engines).toBe(true);
    const [maj, minor, patch] = version.split('.').map(Number);
    expect(ranges.some((m) => Number(m![1]) === maj && (minor > Number(m![2]) || (minor === Number(m![2]) && patch >= Number(m![3]))))).toBe(true);
    // and so is the Node this suite runs on (the toolchain the tests vouch for)
    const [tmaj, tmin] = process.versions.node.split('.').map(Number);
    expect(ranges.some((m) => Number(m![1]) === tmaj && tmin >= Number(m![2])), `Node ${process.versions.node} vs ${engines}`).toBe(true);
    expect(args.get('NODE_SHA256_AMD64')).toMatch(/^[0-9a-f]{64}$/);
    expect(args.get('NODE_SHA256_ARM64')).toMatch(/^[0-9a-f]{64}$/);
    const dl = runs(build).find((r) => r.includes('nodejs.org/dist/'));
    expect(dl).toBeDefined();
    expect(dl).toMatch(/https:\/\/nodejs\.org\/dist\/v\$\{NODE_VERSION\}\/node-v\$\{NODE_VERSION\}-linux-/);
    expect(dl).toMatch(/sha256sum -c/);
    // pipefail, so a failing curl in a pipe fails the build
    expect(build.instructions.find((i) => i.keyword === 'SHELL')?.json).toEqual(['/bin/bash', '-o', 'pipefail', '-c']);
    // Node in the run stage comes from the build stage, the same binary
    expect(run.instructions.some((i) => i.keyword === 'COPY' && i.flags.from === 'build' && i.args.startsWith('/usr/local/bin/node '))).toBe(true);
  });

  it('builds with npm ci, the addon for KMFLEET_CUDA_ARCHS (default 80;86;89;90), then prunes dev deps', () => {
    expect(stageArgs(build).get('KMFLEET_CUDA_ARCHS')).toBe('80;86;89;90');
    // CMakeLists.txt reads the same variable from the environment
    expect(readFileSync(join(ROOT, 'CMakeLists.txt'), 'utf8')).toMatch(/\$ENV\{KMFLEET_CUDA_ARCHS\}/);
    const r = runs(build);
    const ci = r.findIndex((x) => /\bnpm ci\b/.test(x));
    const b = r.findIndex((x) => /KMFLEET_CUDA_ARCHS="\$\{KMFLEET_CUDA_ARCHS\}" npm run build\b/.test(x));
    const prune = r.findIndex((x) => /\bnpm prune --omit=dev\b/.test(x));
    expect(ci).toBeGreaterThanOrEqual(0);
    expect(b).toBeGreaterThan(ci);
    expect(prune).toBeGreaterThanOrEqual(b);
    // the lockfile is copied before npm ci (layer cache) and package.json's build script exists
    const scripts = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts;
    expect(scripts.build).toBeDefined();
    expect(build.instructions.some((i) => i.keyword === 'COPY' && /package-lock\.json/.test(i.args))).toBe(true);
  });

  it('runs as a fixed non-root uid, with tini as PID 1 forwarding SIGTERM to `node bin/kmfleet.js worker`', () => {
    const user = last(run, 'USER')!.args.trim();
    const uid = user.split(':')[0];
    expect(uid).toMatch(/^\d+$/); // numeric: Kubernetes runAsNonRoot can check it
    expect(Number(uid)).toBeGreaterThan(0);
    expect(user).not.toMatch(/^root\b/);
    // the user is created in the run stage with the same uid
    expect(runs(run).some((x) => x.includes(`--uid ${uid}`))).toBe(true);
    expect(last(run, 'ENTRYPOINT')!.json).toEqual(['tini', '--', 'node', 'bin/kmfleet.js']);
    expect(last(run, 'CMD')!.json).toEqual(['worker']);
    expect(runs(run).some((x) => /apt-get install[^&]*\btini\b/.test(x))).toBe(true);
    expect(last(run, 'STOPSIGNAL')?.args.trim() ?? 'SIGTERM').toBe('SIGTERM');
    // bin/kmfleet.js loads dist/cli/main.js (CONTRIBUTING): both are in the image
    const copies = run.instructions.filter((i) => i.keyword === 'COPY').map((i) => i.args);
    expect(copies.some((c) => /\/src\/dist \.\/dist$/.test(c))).toBe(true);
    expect(copies.some((c) => /\/src\/bin \.\/bin$/.test(c))).toBe(true);
    expect(copies.some((c) => /\/src\/node_modules \.\/node_modules$/.test(c))).toBe(true);
  });

  it('copies the addon from where CMakeLists.txt puts it, with the package.json that marks the package root', () => {
    // native/index.ts finds build/Release/… by walking up to the package.json named "kmfleet"
    expect(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).name).toBe('kmfleet');
    expect(run.instructions.some((i) => i.keyword === 'COPY' && i.flags.from === 'build' && /\/src\/package\.json \.\/package\.json$/.test(i.args))).toBe(true);
    const cmake = readFileSync(join(ROOT, 'CMakeLists.txt'), 'utf8');
    const target = /add_library\((\w+) SHARED/.exec(cmake)![1];
    expect(cmake).toMatch(/SUFFIX "\.node"/);
    const addon = `build/Release/${target}.node`;
    expect(run.instructions.some((i) => i.keyword === 'COPY' && i.flags.from === 'build' && i.args.includes(`/src/${addon} ./${addon}`))).toBe(true);
  });

  it('copies the dashboard static files where the dashboard plugin looks for them from dist/', () => {
    const plugin = readFileSync(join(ROOT, 'dashboard', 'plugin.ts'), 'utf8');
    expect(plugin).toContain("'../../dashboard/static'");
    expect(existsSync(join(ROOT, 'dashboard', 'static', 'index.html'))).toBe(true);
    expect(run.instructions.some((i) => i.keyword === 'COPY' && i.flags.from === 'build' && i.args.includes('/src/dashboard/static ./dashboard/static'))).toBe(true);
  });

  it('health-checks /healthz on the metrics port, and exposes that port', () => {
    const hc = last(run, 'HEALTHCHECK')!;
    expect(hc).toBeDefined();
    expect(hc.args.startsWith('CMD')).toBe(true);
    expect(hc.args).toContain(HEALTH_PATH);
    expect(hc.args).toContain(`KMFLEET_METRICS_PORT||${DEFAULT_METRICS_PORT}`);
    expect(hc.flags.interval).toMatch(/^\d+s$/);
    expect(hc.flags['start-period']).toMatch(/^\d+s$/);
    expect(last(run, 'EXPOSE')!.args.trim()).toBe(String(DEFAULT_METRICS_PORT));
    expect(last(run, 'ENV')!.args).toContain(`KMFLEET_METRICS_PORT=${DEFAULT_METRICS_PORT}`);
  });

  it('lint: apt lists cleaned in the same RUN, no recommends, no ADD of URLs, no sudo, no secrets in ENV/ARG', () => {
    for (const r of df.all.filter((i) => i.keyword === 'RUN').map((i) => i.args)) {
      if (!/apt-get install/.test(r)) continue;
      expect(r).toMatch(/apt-get update/);
      expect(r).toMatch(/--no-install-recommends/);
      expect(r).toMatch(/-y\b/);
      expect(r).toMatch(/rm -rf \/var\/lib\/apt\/lists\/\*/);
    }
    expect(df.all.some((i) => i.keyword === 'ADD')).toBe(false);
    expect(text).not.toMatch(/\bsudo\b/);
    for (const i of df.all.filter((x) => x.keyword === 'ENV' || x.keyword === 'ARG')) {
      expect(i.args).not.toMatch(/SECRET|PASSWORD|TOKEN|AWS_ACCESS_KEY|REDIS_URL/i);
    }
    expect(df.all.filter((i) => i.keyword === 'MAINTAINER')).toHaveLength(0);
  });

  it('lint: the run stage takes its files from the build stage (COPY --from), never from the context', () => {
    const copies = run.instructions.filter((i) => i.keyword === 'COPY');
    expect(copies.length).toBeGreaterThan(0);
    for (const c of copies) expect(c.flags.from, c.args).toBe('build');
  });

  it('.dockerignore is an allowlist that admits exactly what the build stage COPYs, and those paths exist', () => {
    const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    expect(ignore[0]).toBe('**');
    const allowed = new Set(ignore.filter((l) => l.startsWith('!')).map((l) => l.slice(1).replace(/\/$/, '')));
    const sources = build.instructions
      .filter((i) => i.keyword === 'COPY' && !i.flags.from)
      .flatMap((i) => i.args.trim().split(/\s+/).slice(0, -1))
      .map((p) => p.replace(/\/$/, ''));
    expect(new Set(sources)).toEqual(allowed);
    for (const s of sources) expect(existsSync(join(ROOT, s)), `${s} (COPY source) is missing`).toBe(true);
    for (const banned of ['**/node_modules', '**/.env']) expect(ignore).toContain(banned);
  });
});
