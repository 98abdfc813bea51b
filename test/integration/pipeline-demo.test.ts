/**
 * `kmfleet demo` end to end in a child process, at a small size: it starts its own redis-server and s3rver, runs one
 * job through the SDK and an in-process worker, and leaves a report and the summary in --out.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderReportSvg } from '../../cli/commands/demo-report.js';
import { ensureDistBuilt, ROOT } from './pipeline-fixture.js';

describe('kmfleet demo', () => {
  let dir: string;
  beforeAll(() => {
    ensureDistBuilt();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-demo-test-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('runs a job end to end and writes the report', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const v of ['REDIS_URL', 'KMFLEET_S3_ENDPOINT', 'AWS_ACCESS_KEY_ID', 'AWS_PROFILE']) delete env[v];
    const out = join(dir, 'out');
    const child = spawn(
      process.execPath,
      [join(ROOT, 'bin', 'kmfleet.js'), 'demo', '--rows', '20000', '--dims', '8', '--k', '8', '--centers', '8', '--max-iter', '10', '--out', out],
      { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let text = '';
    child.stdout.on('data', (d) => (text += d));
    child.stderr.on('data', (d) => (text += d));
    const code = await new Promise((r) => child.once('exit', r));
    expect(code, text).toBe(0);
    expect(text).toMatch(/redis {3}local redis-server at redis:\/\/127\.0\.0\.1:\d+/);
    expect(text).toMatch(/outputs s3:\/\/kmfleet-demo\/runs\/demo-[a-z0-9]+\//);
    expect(text).toMatch(/centroids\.npy +sha256:[0-9a-f]{16}/);
    expect(text).not.toMatch(/NodeVersionSupportWarning/);
    const svg = readFileSync(join(out, 'report.svg'), 'utf8');
    expect(svg).toMatch(/^<svg [^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    expect(svg).toContain('inertia per iteration');
    const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
    expect(summary.clusterSizes.reduce((a: number, b: number) => a + b, 0)).toBe(20_000);
    expect(svg.match(/<rect x=/g)).toHaveLength(summary.clusterSizes.length);
  });

  it('report numbers are printed as they are', () => {
    const svg = renderReportSvg({ title: 't', subtitle: 's', inertia: [100, 50.5], clusterSizes: [2500, 2500, 2500, 2500] });
    expect(svg).toContain('mean 2500)');
    expect(svg).toContain('>50.5<');
  });
});
