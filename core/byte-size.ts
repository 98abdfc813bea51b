/**
 * Sizes as people write them for memory budgets: `12G`, `512M`, `1.5GiB`, `64k`, or plain bytes. Units are binary
 * (K = 1024), as `free -h`, Kubernetes' `Gi` and `docker --memory` count them.
 */
const UNITS: Record<string, number> = { '': 1, b: 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

/** Bytes of `text`; throws a RangeError that quotes `what` and the text when it is not a size. */
export function parseByteSize(text: string, what: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$/i.exec(text);
  const bytes = m ? Math.floor(Number(m[1]) * UNITS[m[2].toLowerCase()]) : NaN;
  if (!Number.isSafeInteger(bytes)) {
    throw new RangeError(`${what} must be a size such as 512M, 12G or 1.5GiB (binary units), got '${text}'`);
  }
  return bytes;
}

/** `bytes` for a log or a message, in the largest binary unit that keeps it ≥ 1 (e.g. "8.0 GiB"). */
export function formatByteSize(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = bytes;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${bytes} B` : `${v.toFixed(1)} ${units[i]}`;
}
