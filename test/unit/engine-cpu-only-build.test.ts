// The CPU-only build (npm run build:native:cpu → build-cpu/) loads through KMFLEET_ADDON, says why there is no
// GPU, and runs the CPU engine. Built here when missing (incremental; CI builds it in scripts/setup).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const addon = join(root, 'build-cpu', 'Release', 'kmfleet_native.node');

describe('CPU-only build', () => {
  it("gpuInfo() says 'built without CUDA'; the CPU engine works; backend 'cuda' is a DeviceError", async () => {
    if (!existsSync(addon)) {
      execFileSync('npm', ['run', '--silent', 'build:native:cpu'], { cwd: root, stdio: 'inherit', env: { ...process.env, CMAKE_BUILD_PARALLEL_LEVEL: '2' } });
    }
    process.env.KMFLEET_ADDON = addon; // read when native/index.ts first loads the addon, i.e. below
    const native = await import('../../native/index.js');
    const info = native.gpuInfo();
    expect(info).toEqual({ available: false, reason: 'built without CUDA', devices: [] });
    const e = await native.Engine.open({ rows: 100, dims: 2, k: 2, metric: 'l2', dtype: 'f32' });
    try {
      expect(e.plan.backend).toBe('cpu');
      expect(e.plan.device).toMatch(/^cpu /);
      e.setCentroids(Float32Array.from([0, 0, 10, 10]));
      e.beginPass('assign');
      const rows = Float32Array.from({ length: 200 }, (_, i) => (i < 100 ? 0.5 : 9.5));
      e.buffer(0).set(new Uint8Array(rows.buffer));
      await e.feed(0, 0, 100);
      const r = await e.finishPass();
      expect(Array.from(r.counts)).toEqual([50, 50]);
    } finally {
      e.close();
    }
    const err = await native.Engine.open({ rows: 10, dims: 2, k: 2, metric: 'l2', dtype: 'f32', backend: 'cuda' }).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(native.DeviceError);
    expect((err as Error).message).toMatch(/built without CUDA/);
  }, 300_000);
});
