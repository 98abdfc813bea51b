// The kmfleet dashboard page: polls the JSON API every second and renders with DOM calls only.
// Everything shown comes from textContent (job ids, names and failure reasons are user data): no innerHTML.
// Every URL is relative (api/…, not /api/…): the page works wherever it is mounted, behind any sub-path.
'use strict';
(function () {
  const STATES = ['waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed'];
  const PAGE = 25;
  const $ = (sel) => document.querySelector(sel);
  const h = (tag, attrs, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'style') e.style.cssText = v; // CSSOM, which the page's CSP allows (a style attribute it would not)
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
    }
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) e.append(c instanceof Node ? c : String(c));
    return e;
  };
  const num = (x) => (x === null || x === undefined ? '–' : Math.abs(x) >= 1e5 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : String(+x.toPrecision(6)));
  const ago = (ms) => {
    if (!ms) return '–';
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.floor(s / 60)}m ago` : s < 86400 ? `${Math.floor(s / 3600)}h ago` : `${Math.floor(s / 86400)}d ago`;
  };
  const dur = (ms) => {
    if (ms === null || ms === undefined) return '–';
    const s = Math.round(ms / 1000);
    return s < 60 ? `${(ms / 1000).toFixed(1)}s` : s < 3600 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, '0')}m`;
  };
  const api = async (path, init) => {
    const r = await fetch(path, init);
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
    return body;
  };
  const jobPath = (id, sub) => `api/jobs/${encodeURIComponent(id)}${sub ? `/${sub}` : ''}`;
  const pill = (state) => h('span', { class: `pill s-${state}` }, state);
  const fraction = (p) => (p && p.maxIter ? Math.min(1, p.iteration / p.maxIter) : 0);
  const bar = (p, big, failed) => h('div', { class: `bar${big ? ' big' : ''}${failed ? ' failed' : ''}` }, h('span', { style: `width:${(fraction(p) * 100).toFixed(1)}%` }));
  const finishedState = (s) => s === 'completed' || s === 'failed';
  const cancelled = (job) => job.failedReason === 'cancelled';

  /** What a job is doing or did, in words: never a stale phase of a job that is no longer running. */
  function describe(job, p) {
    const at = p ? `iteration ${p.iteration} / ${p.maxIter}` : '';
    const attempts = `attempt${job.attemptsMade === 1 ? '' : 's'}`;
    switch (job.state) {
      case 'active':
        return p ? `${p.phase} · ${at}${p.etaMs !== null && p.etaMs !== undefined ? ` · ETA ${dur(p.etaMs)}` : ''}` : 'starting';
      case 'failed':
        if (cancelled(job)) return p ? `cancelled while ${p.phase} · at ${at}` : 'cancelled before it started';
        return p ? `failed while ${p.phase} · at ${at} · ${job.attemptsMade} ${attempts}` : `failed before it started · ${job.attemptsMade} ${attempts}`;
      case 'delayed':
        return job.attemptsMade > 0
          ? `retry after ${job.attemptsMade} failed ${attempts}, waiting out its back-off${p ? ` · last at ${p.phase}, ${at}` : ''}`
          : 'delayed: runs later';
      case 'waiting':
      case 'prioritized':
        return p && p.iteration > 0 ? `queued · resumes from its checkpoint (last at ${at})` : 'queued';
      default:
        return p ? `${p.phase} · ${at}` : job.state;
    }
  }

  let config = { actions: [] };
  let selected = decodeURIComponent((location.hash.match(/^#job=(.+)$/) || [])[1] || '') || null;
  let filter = 'all';
  let offset = 0;
  let lastPage = null;
  let scale = localStorage.getItem('kmfleet.scale') === 'linear' ? 'linear' : 'log';

  function select(id) {
    selected = id;
    history.replaceState(null, '', `#job=${encodeURIComponent(id)}`);
    renderJobs();
    refreshDetail();
  }

  function setStatus(ok, text) {
    $('#status').className = `status ${ok ? 'ok' : 'err'}`;
    $('#status-text').textContent = text;
  }

  function setFilter(state) {
    filter = filter === state ? 'all' : state;
    offset = 0;
    refreshQueue();
  }

  function renderCounts(counts) {
    $('#counts').replaceChildren(...STATES.map((s) =>
      h('button', { class: `count s-${s}${filter === s ? ' on' : ''}`, 'data-state': s, title: `show ${s} jobs`, onclick: () => setFilter(s) },
        h('div', { class: 'n' }, String(counts[s] ?? 0)), h('div', { class: 'label' }, s))));
  }

  function renderJobs() {
    if (!lastPage) return;
    const rows = lastPage.jobs.map((j) => {
      const p = j.progress;
      const progressCell = j.state === 'active'
        ? h('td', {}, bar(p), h('small', { class: 'muted' }, p ? `${p.iteration} / ${p.maxIter}` : 'starting'))
        : j.state === 'failed'
          ? h('td', { class: 'stopped' }, cancelled(j) ? 'cancelled' : 'failed', p ? ` at ${p.iteration} / ${p.maxIter}` : '')
          : h('td', { class: 'muted' }, j.result ? `${j.result.iterations} it` : p && p.iteration > 0 ? `${p.iteration} / ${p.maxIter}` : '–');
      return h('tr', { class: j.id === selected ? 'selected' : '', 'data-job': j.id, onclick: () => select(j.id) },
        h('td', { class: 'id', title: j.id }, j.id),
        h('td', {}, pill(j.state), j.failedReason ? h('span', { class: 'reason', title: j.failedReason }, j.failedReason) : null),
        h('td', {}, j.name ?? h('span', { class: 'muted' }, '–')),
        progressCell,
        h('td', {}, num(j.result ? j.result.inertia : p ? p.inertia : null)),
        h('td', { class: 'muted' }, ago(Math.max(j.finishedAt || 0, p ? p.updatedAt : 0, j.startedAt || 0, j.createdAt))));
    });
    $('#jobs tbody').replaceChildren(...rows);
    $('#jobs-title').textContent = filter === 'all' ? 'Jobs' : `Jobs · ${filter}`;
    $('#jobs-empty').hidden = rows.length > 0;
    $('#jobs').hidden = rows.length === 0;
    const { total } = lastPage;
    $('#page-text').textContent = total ? `${Math.min(offset + 1, total)}–${Math.min(offset + rows.length, total)} of ${total}` : '';
    $('#prev').disabled = offset === 0;
    $('#next').disabled = offset + PAGE >= total;
  }

  function renderSchedules(list) {
    $('#schedules tbody').replaceChildren(...list.map((s) => h('tr', {},
      h('td', {}, s.name),
      h('td', {}, s.cron ? `cron ${s.cron}${s.tz ? ` (${s.tz})` : ''}` : `every ${dur(s.every)}`),
      h('td', {}, s.next ? new Date(s.next).toLocaleString() : '–'),
      h('td', {}, s.iterationCount ?? '–'),
      h('td', {}, s.spec && s.spec.name ? s.spec.name : '–'),
      h('td', {}, s.spec ? s.spec.k : '–'))));
    $('#schedules-empty').hidden = list.length > 0;
    $('#schedules').hidden = list.length === 0;
  }

  async function refreshQueue() {
    try {
      const [queue, page] = await Promise.all([api('api/queue'), api(`api/jobs?state=${filter}&offset=${offset}&limit=${PAGE}`)]);
      if (page.total > 0 && offset >= page.total) { // the page emptied under us: go back to the last one
        offset = Math.max(0, Math.floor((page.total - 1) / PAGE) * PAGE);
        return refreshQueue();
      }
      lastPage = page;
      $('#where').textContent = `${queue.where} · prefix ${queue.prefix} · queue ${queue.queue}`;
      renderCounts(queue.counts);
      if (!selected) {
        const first = page.jobs.find((j) => j.state === 'active') || page.jobs[0];
        if (first) select(first.id);
      }
      renderJobs();
      renderSchedules(queue.schedules);
      setStatus(true, `live · ${new Date(queue.at).toLocaleTimeString()}`);
    } catch (err) {
      setStatus(false, `offline: ${err.message}`);
    }
  }

  const stat = (k, v) => h('div', { class: 'stat' }, h('div', { class: 'k' }, k), h('div', { class: 'v' }, v));

  async function act(action, id) {
    if (!confirm(`${action[0].toUpperCase()}${action.slice(1)} job ${id}?`)) return;
    try {
      const r = await api(jobPath(id, action), { method: 'POST', headers: { 'X-Kmfleet': action } });
      setStatus(true, `${action} ${id}: ${r.outcome}`);
    } catch (err) {
      setStatus(false, `${action} failed: ${err.message}`);
    }
    refreshQueue();
    refreshDetail();
  }

  /** The actions that make sense in this state, among those the server allows. */
  function actionsFor(job) {
    const can = {
      cancel: !finishedState(job.state),
      retry: job.state === 'failed',
      promote: job.state === 'delayed',
      remove: job.state !== 'active',
    };
    return config.actions.filter((a) => can[a]);
  }

  let historyCache = { name: null, at: 0, rows: [] };
  async function modelHistory(name) {
    if (historyCache.name !== name || Date.now() - historyCache.at > 5000) {
      historyCache = { name, at: Date.now(), rows: await api(`api/models/${encodeURIComponent(name)}/history`).catch(() => []) };
    }
    return historyCache.rows;
  }

  function setScale(s) {
    scale = s;
    localStorage.setItem('kmfleet.scale', s);
    refreshDetail();
  }

  async function refreshDetail() {
    const id = selected;
    if (!id) return;
    let job, its;
    try {
      [job, its] = await Promise.all([api(jobPath(id)), api(jobPath(id, 'iterations'))]);
    } catch (err) {
      if (id === selected) $('#detail').replaceChildren(h('h3', {}, id), h('p', { class: 'muted' }, err.message));
      return;
    }
    const name = job.spec && job.spec.name;
    const hist = name ? await modelHistory(name) : [];
    if (id !== selected) return;
    const p = job.progress, r = job.result;
    const head = h('div', { class: 'detail-head' }, h('h3', {}, id), pill(job.state),
      h('div', { class: 'actions' }, actionsFor(job).map((a) => h('button', { id: a, class: a === 'cancel' || a === 'remove' ? 'danger' : '', onclick: () => act(a, id) }, a))));
    const progressLine = h('div', { id: 'progress-text', class: job.state === 'failed' ? 'stopped' : 'muted' },
      r ? `${r.iterations} iterations · ${r.converged ? `converged (${r.stopReason})` : 'stopped at maxIter'} · ${dur(r.timings && r.timings.totalMs)}`
        : describe(job, p));
    const stats = h('div', { class: 'stats' },
      stat('inertia', num(r ? r.inertia : p ? p.inertia : null)),
      stat('reassigned', p && p.reassignedFraction !== null ? `${(p.reassignedFraction * 100).toFixed(2)}%` : p ? num(p.reassigned) : '–'),
      stat('shift', num(p ? p.shift : null)),
      stat('k', job.spec ? job.spec.k : '–'),
      stat('model', name || '–'),
      stat('attempts', job.attemptsMade),
      stat('dataset', job.spec ? job.spec.dataset.uri : '–'),
      stat(finishedState(job.state) ? 'finished' : 'started', ago(finishedState(job.state) ? job.timestamps.finishedAt : job.timestamps.startedAt)),
      stat(r ? 'device' : 'precision', r ? `${r.backend} ${r.device}` : job.spec ? job.spec.precision : '–'));
    const parts = [head, bar(r ? { iteration: 1, maxIter: 1 } : p, true, job.state === 'failed'), progressLine, stats];
    if (job.failedReason) parts.push(h('div', { class: 'failure' }, job.failedReason));
    if (job.cancelRequested && !finishedState(job.state)) parts.push(h('div', { class: 'failure' }, `cancel requested: ${job.cancelRequested}`));
    const other = scale === 'log' ? 'linear' : 'log';
    parts.push(h('div', { class: 'chart-head' }, h('h2', {}, `Convergence · ${its.length} iteration${its.length === 1 ? '' : 's'}`),
      h('button', { id: 'scale', class: 'quiet', title: `inertia axis: ${scale}; show ${other}`, onclick: () => setScale(other) }, `${other} scale`)),
    window.kmfleetChart(its, { scale }));
    if (hist.length) {
      parts.push(h('h2', { style: 'margin-top:1rem' }, `Model ${name} · results`), h('table', { class: 'history' },
        h('thead', {}, h('tr', {}, h('th', {}, 'job'), h('th', {}, 'finished'), h('th', {}, 'iterations'), h('th', {}, 'inertia'))),
        h('tbody', {}, hist.slice(0, 8).map((x) => h('tr', {}, h('td', { class: 'id' }, x.jobId), h('td', {}, ago(x.finishedAt)), h('td', {}, x.iterations), h('td', {}, num(x.inertia)))))));
    }
    $('#detail').replaceChildren(...parts);
  }

  async function tick() {
    await Promise.all([refreshQueue(), refreshDetail()]);
    setTimeout(tick, 1000);
  }
  window.addEventListener('hashchange', () => {
    const id = decodeURIComponent((location.hash.match(/^#job=(.+)$/) || [])[1] || '');
    if (id && id !== selected) select(id);
  });
  $('#prev').addEventListener('click', () => { offset = Math.max(0, offset - PAGE); refreshQueue(); });
  $('#next').addEventListener('click', () => { offset += PAGE; refreshQueue(); });
  api('api/config').then((c) => (config = c), () => undefined).finally(tick);
})();
