import { describe, expect, it } from 'vitest';
import { chooseGpus, parseGpus } from '../../core/index.js';

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
