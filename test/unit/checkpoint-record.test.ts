/**
 * The checkpoint record HASH has one parser (producer/job-state.ts), used by the SDK's readCheckpointRecord and by the
 * worker's checkpoint store: every field the worker writes comes back typed, and fields a hash lacks stay absent.
 */
import { describe, expect, it } from 'vitest';
import { parseCheckpointRecord } from '../../producer/job-state.js';

describe('parseCheckpointRecord', () => {
  it('parses the fields a worker writes', () => {
    const h = {
      generation: '3', iteration: '12', uri: 's3://o/j/_checkpoints/c3-a.ckpt', specHash: 'abc', datasetEtag: '"e1"',
      sha256: 'f'.repeat(64), bytes: '25712', updatedAt: '1795322429349', claimed: '3', prevUri: 's3://o/j/_checkpoints/c3-b.ckpt',
    };
    expect(parseCheckpointRecord(h)).toEqual({
      generation: 3, iteration: 12, uri: 's3://o/j/_checkpoints/c3-a.ckpt', specHash: 'abc', datasetEtag: '"e1"',
      sha256: 'f'.repeat(64), bytes: 25712, updatedAt: 1795322429349,
    });
  });

  it('is null without a uri (no checkpoint yet, or only a claim) and leaves out what the hash lacks', () => {
    expect(parseCheckpointRecord({})).toBeNull();
    expect(parseCheckpointRecord({ claimed: '1' })).toBeNull();
    const r = parseCheckpointRecord({ generation: '1', iteration: '2', uri: 's3://b/k', specHash: 'h', updatedAt: '5' });
    expect(r).toStrictEqual({ generation: 1, iteration: 2, uri: 's3://b/k', specHash: 'h', updatedAt: 5 });
  });
});
