/**
 * The memory cache's spare host buffer (worker/dataset/host-buffer-pool.ts): reused by the next job that fits, dropped
 * after the idle time, never a slice of Node's shared pool.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { dropSpareHostBuffer, giveBackHostBuffer, takeHostBuffer } from '../../worker/dataset/host-buffer-pool.js';

const MB = 1 << 20;

describe('host buffer pool', () => {
  afterEach(() => dropSpareHostBuffer());

  it('gives the next job that fits the memory of the last one', () => {
    const a = takeHostBuffer(8 * MB);
    expect(a.length).toBe(8 * MB);
    giveBackHostBuffer(a);
    const b = takeHostBuffer(5 * MB);
    expect(b.length).toBe(5 * MB);
    expect(b.buffer).toBe(a.buffer);
    // in use now: a second job gets its own
    const c = takeHostBuffer(5 * MB);
    expect(c.buffer).not.toBe(a.buffer);
    // the larger allocation is the one kept
    giveBackHostBuffer(b);
    giveBackHostBuffer(c);
    expect(takeHostBuffer(8 * MB).buffer).toBe(a.buffer);
  });

  it('does not hand out a spare that is too small, and keeps no small buffers', () => {
    giveBackHostBuffer(takeHostBuffer(2 * MB));
    expect(takeHostBuffer(3 * MB).buffer.byteLength).toBeGreaterThanOrEqual(3 * MB);
    const small = Buffer.allocUnsafe(100);
    giveBackHostBuffer(small);
    expect(takeHostBuffer(2 * MB).buffer).not.toBe(small.buffer);
  });

  it('drops the spare after the idle time', async () => {
    const a = takeHostBuffer(2 * MB);
    giveBackHostBuffer(a, 20);
    await new Promise((r) => setTimeout(r, 60));
    expect(takeHostBuffer(2 * MB).buffer).not.toBe(a.buffer);
  });
});
