// The convergence curve: inertia per iteration as an inline SVG, drawn with DOM calls (no markup strings,
// so nothing in the data can become an element). window.kmfleetChart(records) -> <svg>.
'use strict';
(function () {
  const NS = 'http://www.w3.org/2000/svg';
  const el = (name, attrs, text) => {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fmt = (x) => (Math.abs(x) >= 1e5 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(2) : x.toPrecision(4));

  window.kmfleetChart = function (records) {
    const W = 560, H = 240, L = 64, R = 14, T = 12, B = 30;
    const svg = el('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'inertia per iteration' });
    const defs = el('defs');
    const grad = el('linearGradient', { id: 'fade', x1: 0, y1: 0, x2: 0, y2: 1 });
    grad.append(el('stop', { offset: '0%', 'stop-color': '#6aa8ff', 'stop-opacity': 0.28 }),
      el('stop', { offset: '100%', 'stop-color': '#6aa8ff', 'stop-opacity': 0 }));
    defs.append(grad);
    svg.append(defs);
    if (!records.length) {
      svg.append(el('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no iterations yet'));
      return svg;
    }
    const xs = records.map((r) => r.iteration), ys = records.map((r) => r.inertia);
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
    let y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (y1 - y0 < 1e-12 * Math.max(1, Math.abs(y1))) { y0 -= Math.abs(y0) * 0.01 + 1e-9; y1 += Math.abs(y1) * 0.01 + 1e-9; }
    const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad;
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);

    for (let i = 0; i <= 4; i++) {
      const v = y0 + ((y1 - y0) * i) / 4, y = sy(v);
      svg.append(el('line', { class: i ? 'grid-line' : 'axis', x1: L, x2: W - R, y1: y, y2: y }));
      svg.append(el('text', { x: L - 6, y: y + 4, 'text-anchor': 'end' }, fmt(v)));
    }
    // integer iteration ticks, at most ~8, the last one always shown
    const step = Math.max(1, Math.ceil((x1 - x0) / 8));
    const ticks = [];
    for (let v = x0; v < x1; v += step) ticks.push(v);
    if (x1 - ticks[ticks.length - 1] < step / 2 && ticks.length > 1) ticks.pop();
    ticks.push(x1);
    for (const v of ticks) svg.append(el('text', { x: sx(v), y: H - 10, 'text-anchor': 'middle' }, String(v)));

    const pts = records.map((r) => `${sx(r.iteration).toFixed(1)},${sy(r.inertia).toFixed(1)}`);
    const base = sy(y0).toFixed(1);
    svg.append(el('polygon', { class: 'area', points: `${sx(xs[0]).toFixed(1)},${base} ${pts.join(' ')} ${sx(xs[xs.length - 1]).toFixed(1)},${base}` }));
    svg.append(el('polyline', { class: 'curve', points: pts.join(' '), 'data-points': records.length }));
    if (records.length <= 120) {
      records.forEach((r, i) => {
        const c = el('circle', { class: i === records.length - 1 ? 'pt last' : 'pt', cx: sx(r.iteration), cy: sy(r.inertia), r: 3 });
        c.append(el('title', {}, `iteration ${r.iteration}: inertia ${r.inertia}`));
        svg.append(c);
      });
    }
    return svg;
  };
})();
