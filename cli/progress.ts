/**
 * The progress line of long commands: on a terminal one line rewritten in place; elsewhere (logs, CI, pipes) plain
 * lines, so that nothing is lost to carriage returns. `json` mode writes one JSON object per event instead.
 */
export interface ProgressOptions {
  stream?: NodeJS.WriteStream;
  json?: boolean;
  /** plain-line mode: print at most one line per this many ms (the last update always prints) */
  plainEveryMs?: number;
}

export class ProgressLine {
  private readonly stream: NodeJS.WriteStream;
  private readonly tty: boolean;
  private readonly json: boolean;
  private readonly plainEveryMs: number;
  private lastPlain = Date.now();
  private drawn = false;

  constructor(options: ProgressOptions = {}) {
    this.stream = options.stream ?? process.stderr;
    this.json = options.json ?? false;
    this.tty = !this.json && this.stream.isTTY === true;
    this.plainEveryMs = options.plainEveryMs ?? 0;
  }

  /** a progress update: `text` for people, `event` for --json */
  update(text: string, event?: Record<string, unknown>): void {
    if (this.json) {
      if (event) this.stream.write(JSON.stringify(event) + '\n');
      return;
    }
    if (this.tty) {
      const width = this.stream.columns ? this.stream.columns - 1 : 120;
      this.stream.write('\r\x1b[2K' + text.slice(0, width));
      this.drawn = true;
      return;
    }
    const now = Date.now();
    if (now - this.lastPlain >= this.plainEveryMs) {
      this.lastPlain = now;
      this.stream.write(text + '\n');
    }
  }

  /** end the updating line (so that what follows starts on a fresh line) */
  done(text?: string, event?: Record<string, unknown>): void {
    if (text !== undefined || event) this.update(text ?? '', event);
    if (this.tty && this.drawn) this.stream.write('\n');
    this.drawn = false;
  }
}

/** 1234567 → "1.23M" */
export function humanCount(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  const abs = Math.abs(n);
  if (abs >= 1e9) return (n / 1e9).toFixed(2) + 'G';
  if (abs >= 1e6) return (n / 1e6).toFixed(2) + 'M';
  if (abs >= 1e3) return (n / 1e3).toFixed(1) + 'k';
  return String(Math.round(n));
}

/** 83_000 → "1m23s", 4_200 → "4.2s" */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '?';
  const s = Math.round(ms / 1000);
  if (s < 60) return ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}
