/** The Prometheus text format as the metrics tests read it: `name{labels}` → value, comments and blank lines skipped. */
export function parsePrometheus(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (m) out.set(m[1], Number(m[2]));
  }
  return out;
}
