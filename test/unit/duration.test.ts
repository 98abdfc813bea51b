// Durations as `kmfleet schedule --every` and RepeatInput.every take them.
import { describe, expect, it } from 'vitest';
import { ArgumentError } from '../../producer/index.js';
import { parseDuration } from '../../producer/duration.js';
import { parseRepeat } from '../../producer/schedule.js';

describe('parseDuration', () => {
  it('reads units, compounds and plain ms', () => {
    expect(parseDuration('15m')).toBe(900_000);
    expect(parseDuration('1h')).toBe(3_600_000);
    expect(parseDuration('1h30m')).toBe(5_400_000);
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('250ms')).toBe(250);
    expect(parseDuration('2d')).toBe(172_800_000);
    expect(parseDuration('1.5h')).toBe(5_400_000);
    expect(parseDuration('60000')).toBe(60_000);
    expect(parseDuration(5000)).toBe(5000);
  });

  it('refuses anything else, naming what it is for', () => {
    for (const bad of ['', '15x', 'm', '1h 30m', '-5m', '0s', '0', '0.5ms', 'soon']) {
      expect(() => parseDuration(bad, 'every'), bad).toThrow(ArgumentError);
    }
    expect(() => parseDuration('15x', 'every')).toThrow(/^every must be a duration such as 15m, 1h, 1h30m, 90s, or a positive number of ms \(got "15x"\)$/);
  });

  it('is what a schedule\'s every takes', () => {
    expect(parseRepeat({ every: '15m' })).toEqual({ every: 900_000 });
    expect(() => parseRepeat({ every: 'often' })).toThrow(/every must be a duration/);
  });
});
