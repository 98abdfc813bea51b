/**
 * The demo's report: one self-contained SVG with the convergence curve (inertia per iteration, log scale) and the
 * cluster sizes (sorted, one bar each). No dependencies: the SVG is written by hand.
 */
export interface ReportInput {
  title: string;
  subtitle: string;
  inertia: number[];
  clusterSizes: number[];
}

const W = 960;
const H = 420;
const PAD = { l: 70, r: 20, t: 60, b: 50 };

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function fmt(v: number): string {
  if (v === 0) return '0';
  const e = Math.floor(Math.log10(Math.abs(v)));
  if (e >= 5 || e <= -3) return v.toExponential(2);
  const t = v.toPrecision(4);
  return t.includes('.') ? t.replace(/0+$/, '').replace(/\.$/, '') : t;
}

function panel(x0: number, width: number, title: string, body: string, yLabels: string): string {
  return `<g transform="translate(${x0},0)"><text x="${PAD.l}" y="${PAD.t - 12}" font-size="14" font-weight="bold">${esc(title)}</text>${yLabels}${body}</g>`;
}

export function renderReportSvg(r: ReportInput): string {
  const half = W / 2;
  const pw = half - PAD.l - PAD.r;
  const ph = H - PAD.t - PAD.b;

  // convergence: log10(inertia) against iteration
  const ys = r.inertia.map((v) => Math.log10(Math.max(v, 1e-30)));
  const yMin = Math.min(...ys);
  const yMax = Math.max(...ys);
  const span = yMax - yMin || 1;
  const px = (i: number) => PAD.l + (r.inertia.length <= 1 ? pw / 2 : (i / (r.inertia.length - 1)) * pw);
  const py = (y: number) => PAD.t + ph - ((y - yMin) / span) * ph;
  const path = ys.map((y, i) => `${i === 0 ? 'M' : 'L'}${px(i).toFixed(1)},${py(y).toFixed(1)}`).join(' ');
  const dots = ys.map((y, i) => `<circle cx="${px(i).toFixed(1)}" cy="${py(y).toFixed(1)}" r="2.5" fill="#1f6feb"/>`).join('');
  const convLabels =
    `<text x="${PAD.l - 6}" y="${PAD.t + 4}" font-size="11" text-anchor="end">${fmt(10 ** yMax)}</text>` +
    `<text x="${PAD.l - 6}" y="${PAD.t + ph}" font-size="11" text-anchor="end">${fmt(10 ** yMin)}</text>` +
    `<text x="${PAD.l}" y="${H - PAD.b + 18}" font-size="11">1</text>` +
    `<text x="${PAD.l + pw}" y="${H - PAD.b + 18}" font-size="11" text-anchor="end">${r.inertia.length}</text>` +
    `<text x="${PAD.l + pw / 2}" y="${H - 12}" font-size="12" text-anchor="middle">iteration</text>`;
  const axes = `<path d="M${PAD.l},${PAD.t} V${PAD.t + ph} H${PAD.l + pw}" stroke="#888" fill="none"/>`;
  const conv = panel(0, half, 'inertia per iteration (log scale)', `${axes}<path d="${path}" stroke="#1f6feb" stroke-width="2" fill="none"/>${dots}`, convLabels);

  // cluster sizes, largest first
  const sizes = [...r.clusterSizes].sort((a, b) => b - a);
  const maxSize = Math.max(1, ...sizes);
  const bw = pw / Math.max(1, sizes.length);
  const bars = sizes
    .map((s, i) => {
      const h = (s / maxSize) * ph;
      return `<rect x="${(PAD.l + i * bw).toFixed(2)}" y="${(PAD.t + ph - h).toFixed(1)}" width="${Math.max(0.5, bw - 0.5).toFixed(2)}" height="${h.toFixed(1)}" fill="#2da44e"/>`;
    })
    .join('');
  const total = sizes.reduce((a, b) => a + b, 0);
  const sizeLabels =
    `<text x="${PAD.l - 6}" y="${PAD.t + 4}" font-size="11" text-anchor="end">${maxSize}</text>` +
    `<text x="${PAD.l - 6}" y="${PAD.t + ph}" font-size="11" text-anchor="end">0</text>` +
    `<text x="${PAD.l + pw / 2}" y="${H - 12}" font-size="12" text-anchor="middle">${sizes.length} clusters, largest first (min ${sizes[sizes.length - 1] ?? 0}, mean ${fmt(total / Math.max(1, sizes.length))})</text>`;
  const sizesPanel = panel(half, half, 'cluster sizes (rows)', `${axes}${bars}`, sizeLabels);

  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H + 30}" viewBox="0 0 ${W} ${H + 30}" font-family="sans-serif">` +
    `<rect width="100%" height="100%" fill="white"/>` +
    `<text x="${PAD.l}" y="22" font-size="16" font-weight="bold">${esc(r.title)}</text>` +
    `<text x="${PAD.l}" y="40" font-size="12" fill="#555">${esc(r.subtitle)}</text>` +
    `<g transform="translate(0,10)">${conv}${sizesPanel}</g></svg>\n`
  );
}
