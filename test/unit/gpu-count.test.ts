import { describe, expect, it } from 'vitest';
import { chooseGpus, keptDatasetBytes, parseGpus } from '../../core/index.js';

const GiB = 2 ** 30;
const free = [0, 1, 2, 3].map((ordinal) => ({ ordinal, freeMemory: 80 * GiB }));

describe('GPUs of one job', () => {
  it('parses a count, all and auto, and names the setting in an error', () => {
    expect(parseGpus('2', 'KMFLEET_GPUS_PER_JOB')).toBe(2);
    expect(parseGpus(' all ', 'x')).toBe('all');
    expect(parseGpus('auto', 'x')).toBe('auto');
    for (const bad of ['0', '65', '1.5', 'two', ''])
      expect(() => parseGpus(bad, '--gpus')).toThrow(/--gpus must be an integer from 1 to 64, all or auto/);
  });

  it('takes a count of the free GPUs, at least one and at most all of them', () => {
    expect(chooseGpus(2, free, 0).map((g) => g.ordinal)).toEqual([0, 1]);
    expect(chooseGpus(8, free, 0)).toHaveLength(4);
    expect(chooseGpus('all', free, 0)).toHaveLength(4);
    expect(chooseGpus(3, [], 0)).toEqual([]);
  });

  it('auto: the fewest GPUs whose memory holds the rows', () => {
    expect(chooseGpus('auto', free, 10 * GiB)).toHaveLength(1);
    expect(chooseGpus('auto', free, 100 * GiB)).toHaveLength(2);
    expect(chooseGpus('auto', free, 250 * GiB)).toHaveLength(4);
    expect(chooseGpus('auto', free, 10_000 * GiB)).toHaveLength(4);
  });

  it('auto counts the rows as the engine keeps them: fp16 and bf16 jobs over f32 rows, half the file', () => {
    const f32 = { rows: 400_000_000, rowBytes: 512, dtype: 'f32' };  // 190.7 GiB in the file
    expect(keptDatasetBytes(f32, 'fp32')).toBe(f32.rows * 512);
    expect(keptDatasetBytes(f32, undefined)).toBe(f32.rows * 512);  // auto: fp32 for f32 rows
    expect(keptDatasetBytes(f32, 'tf32')).toBe(f32.rows * 512);
    expect(keptDatasetBytes(f32, 'fp16')).toBe(f32.rows * 256);
    expect(keptDatasetBytes(f32, 'bf16')).toBe(f32.rows * 256);
    expect(keptDatasetBytes({ rows: 10, rowBytes: 256, dtype: 'f16' }, 'fp16')).toBe(2560);
    expect(chooseGpus('auto', free, keptDatasetBytes(f32, 'fp32'))).toHaveLength(3);
    expect(chooseGpus('auto', free, keptDatasetBytes(f32, 'fp16'))).toHaveLength(2);
  });
});

describe('KMFLEET_GPUS_PER_JOB', () => {
  it('is 1 by default, takes a count, all or auto, and a bad value names the variable', async () => {
    const { loadWorkerConfig } = await import('../../worker/config.js');
    expect(loadWorkerConfig({}).gpusPerJob).toBe(1);
    expect(loadWorkerConfig({ KMFLEET_GPUS_PER_JOB: '4' }).gpusPerJob).toBe(4);
    expect(loadWorkerConfig({ KMFLEET_GPUS_PER_JOB: 'auto' }).gpusPerJob).toBe('auto');
    expect(() => loadWorkerConfig({ KMFLEET_GPUS_PER_JOB: 'many' })).toThrow(/KMFLEET_GPUS_PER_JOB must be an integer from 1 to 64, all or auto; got 'many'/);
  });
});
