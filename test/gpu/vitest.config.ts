import { defineConfig } from 'vitest/config';

// The GPU suite: runs only on the GPU machine (scripts/gpu-run), never in CI.
export default defineConfig({
  test: {
    include: ['test/gpu/**/*.test.ts'],
    testTimeout: 300_000,
    hookTimeout: 120_000,
    fileParallelism: false,
    reporters: ['verbose'],
  },
});
