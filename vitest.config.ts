import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts', 'test/integration/**/*.test.ts', 'test/faults/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Tests start real servers and native passes that use every core: files run one at a time on a 2-core CI box.
    fileParallelism: false,
    reporters: ['default'],
  },
});
