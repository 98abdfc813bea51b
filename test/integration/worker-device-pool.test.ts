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

describe('device pool: jobs across several GPUs', () => {
  it('takes free ordinals only, and wakes a waiting job when one comes back', async () => {
    const pool = new DevicePool([0, 1, 2, 3]);
    expect(pool.take([1, 2])).toEqual([1, 2]);
    expect(pool.take([2, 3])).toEqual([3]);
    expect(pool.freeOrdinals()).toEqual([0]);
    expect(pool.take([0])).toEqual([0]);
    let woke = false;
    const waiting = pool.anyFree().then(() => { woke = true; });
    await new Promise((r) => setTimeout(r, 10));
    expect(woke).toBe(false);
    pool.release([2, 1]);
    await waiting;
    expect(woke).toBe(true);
    expect(pool.freeOrdinals()).toEqual([1, 2]);
  });
});
