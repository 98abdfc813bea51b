import { describe, expect, it } from 'vitest';
import { DevicePool } from '../../worker/device-pool.js';

describe('device pool: one job per GPU', () => {
  it('hands out distinct ordinals, lowest first, and takes them back once', () => {
    const pool = new DevicePool([0, 1, 2]);
    const a = pool.acquire();
    const b = pool.acquire();
    expect([a, b]).toEqual([0, 1]);
    pool.release(a);
    pool.release(a);
    expect(pool.acquire()).toBe(0);
    expect(pool.acquire()).toBe(2);
    expect(pool.acquire()).toBeUndefined();
    pool.release(7);
    expect(pool.acquire()).toBeUndefined();
    expect(new DevicePool([]).size).toBe(0);
  });
});
