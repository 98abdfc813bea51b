/**
 * Durations as people write them: "15m", "1h", "1h30m", "90s", "250ms", "2d" — or a plain number of ms.
 */
import { ArgumentError } from './errors/job-errors.js';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/gy;

/** ms of a duration (a positive whole number of ms); ArgumentError naming `what` otherwise. */
export function parseDuration(value: string | number, what = 'duration'): number {
  let ms: number;
  const text = typeof value === 'string' ? value.trim() : '';
  if (typeof value === 'number') ms = value;
  else if (/^\d+$/.test(text)) ms = Number(text);
  else {
    ms = 0;
    PART.lastIndex = 0;
    let end = 0;
    for (let m = PART.exec(text); m; m = PART.exec(text)) {
      ms += Number(m[1]) * UNIT_MS[m[2]];
      end = PART.lastIndex;
    }
    if (text === '' || end !== text.length) ms = NaN;
  }
  if (!Number.isSafeInteger(ms) || ms < 1) {
    throw new ArgumentError(`${what} must be a duration such as 15m, 1h, 1h30m, 90s, or a positive number of ms (got ${JSON.stringify(value)})`);
  }
  return ms;
}
