// The convergence curve: inertia per iteration as an inline SVG, drawn with DOM calls (no markup strings,
// so nothing in the data can become an element). window.kmfleetChart(records, { scale }) -> <svg>.
// scale 'log' (the default): a log10 inertia axis, where Lloyd's fast start and long tail both stay readable; it falls
// back to linear when an inertia is 0 or less (a run whose rows sit on their centroids). The <svg> says which it drew
// in data-scale.
'use strict';
(function () {
  const NS = 'http://www.w3.org/2000/svg';
  const el = (name, attrs, text) => {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fmt = (x) => (Math.abs(x) >= 1e5 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(2) : String(+x.toPrecision(4)));

  /** Tick values of a log axis over [lo, hi] (values, not logs): whole decades when the range spans two or more. */
  function logTicks(lo, hi) {
    const d0 = Math.ceil(Math.log10(lo)), d1 = Math.floor(Math.log10(hi));
    if (d1 - d0 >= 1) {
      const every = Math.max(1, Math.ceil((d1 - d0 + 1) / 6));
      const out = [];
      for (let d = d0; d <= d1; d += every) out.push(10 ** d);
      return out;
    }
    const l0 = Math.log10(lo), l1 = Math.log10(hi);
    return [0, 1, 2, 3, 4].map((i) => 10 ** (l0 + ((l1 - l0) * i) / 4));
  }

  window.kmfleetChart = function (records, opts) {
    const W = 560, H = 240, L = 64, R = 14, T = 12, B = 30;
    const ys = records.map((r) => r.inertia);
    const scale = (opts && opts.scale) === 'linear' || ys.some((y) => !(y > 0)) ? 'linear' : 'log';
    const svg = el('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `inertia per iteration (${scale} scale)`, 'data-scale': scale });
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
    const f = scale === 'log' ? Math.log10 : (y) => y; // the axis works on f(inertia)
    const xs = records.map((r) => r.iteration), fs = ys.map(f);
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
    let y0 = Math.min(...fs), y1 = Math.max(...fs);
    if (y1 - y0 < 1e-12 * Math.max(1, Math.abs(y1))) { y0 -= Math.abs(y0) * 0.01 + 1e-9; y1 += Math.abs(y1) * 0.01 + 1e-9; }
    const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad;
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (v) => T + (1 - (v - y0) / (y1 - y0)) * (H - T - B); // v is f(inertia)

    svg.append(el('line', { class: 'axis', x1: L, x2: W - R, y1: sy(y0), y2: sy(y0) }));
    const ticks = scale === 'log' ? logTicks(10 ** y0, 10 ** y1) : [0, 1, 2, 3, 4].map((i) => y0 + ((y1 - y0) * i) / 4);
    for (const t of ticks) {
      const y = sy(f(t));
      svg.append(el('line', { class: 'grid-line', x1: L, x2: W - R, y1: y, y2: y }));
      svg.append(el('text', { class: 'y-tick', x: L - 6, y: y + 4, 'text-anchor': 'end' }, fmt(t)));
    }
    // integer iteration ticks, at most ~8, the last one always shown
    const step = Math.max(1, Math.ceil((x1 - x0) / 8));
    const xt = [];
    for (let v = x0; v < x1; v += step) xt.push(v);
    if (x1 - xt[xt.length - 1] < step / 2 && xt.length > 1) xt.pop();
    xt.push(x1);
    for (const v of xt) svg.append(el('text', { x: sx(v), y: H - 10, 'text-anchor': 'middle' }, String(v)));

    const pts = records.map((r, i) => `${sx(r.iteration).toFixed(1)},${sy(fs[i]).toFixed(1)}`);
    const base = sy(y0).toFixed(1);
    svg.append(el('polygon', { class: 'area', points: `${sx(xs[0]).toFixed(1)},${base} ${pts.join(' ')} ${sx(xs[xs.length - 1]).toFixed(1)},${base}` }));
    svg.append(el('polyline', { class: 'curve', points: pts.join(' '), 'data-points': records.length }));
    if (records.length <= 120) {
      records.forEach((r, i) => {
        const c = el('circle', { class: i === records.length - 1 ? 'pt last' : 'pt', cx: sx(r.iteration), cy: sy(fs[i]), r: 3 });
        c.append(el('title', {}, `iteration ${r.iteration}: inertia ${r.inertia}`));
        svg.append(c);
      });
    }
    return svg;
  };
})();
