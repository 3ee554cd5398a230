// The dashboard's pages (docs/dashboard.md): each reads the JSON endpoints under /api/v1 and
// redraws itself as they change. Text from the service is only ever set as text (textContent),
// never parsed as HTML. int64 fields arrive as strings (proto3's JSON mapping): Number() them.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const OVER = new Set(['done', 'failed', 'cancelled']);
const COLORS = ['#2563eb', '#16a34a', '#d97706', '#9333ea', '#dc2626', '#0891b2', '#65a30d', '#db2777'];

function el(ns, tag, attrs, kids) {
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const kid of kids || []) {
    if (kid === null || kid === undefined) continue;
    e.append(kid instanceof Node ? kid : String(kid));
  }
  return e;
}
const h = (tag, attrs, ...kids) => el(null, tag, attrs, kids);
const s = (tag, attrs, ...kids) => el(SVG_NS, tag, attrs, kids);

// The endpoint's answer, parsed; `.text` of the result (non-enumerable) is its raw text, so a
// page can skip redrawing when nothing changed.
async function get(url) {
  const r = await fetch(url, {credentials: 'same-origin'});  // the answers say no-store
  if (r.status === 401) {
    location.href = '/login?next=' + encodeURIComponent(location.pathname);
    throw new Error('the session ended: log in again');
  }
  const text = await r.text();
  const body = JSON.parse(text);
  if (!r.ok) throw new Error(body.error || r.statusText);
  Object.defineProperty(body, 'text', {value: text});
  return body;
}

function median(xs) {
  if (!xs || xs.length === 0) return 0;
  const v = xs.slice().sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}
// A time per call: microseconds below a millisecond (3 significant digits), else ms.
function ms(sec) {
  if (!(sec > 0)) return '—';
  const us = sec * 1e6;
  if (us < 100) return us.toPrecision(3) + ' µs';
  if (us < 1000) return us.toFixed(0) + ' µs';
  const m = sec * 1e3;
  return (m < 100 ? m.toFixed(3) : m.toFixed(1)) + ' ms';
}
function utc(unix) {
  if (!(unix > 0)) return '—';
  return new Date(unix * 1000).toISOString().replace('T', ' ').slice(0, 19);
}
function duration(sec) {
  if (!(sec >= 0) || !isFinite(sec)) return '—';
  sec = Math.round(sec);
  if (sec < 60) return sec + ' s';
  if (sec < 3600) return Math.floor(sec / 60) + ' min ' + (sec % 60) + ' s';
  return Math.floor(sec / 3600) + ' h ' + Math.floor((sec % 3600) / 60) + ' min';
}
function stateCell(state) {
  return h('td', {class: 'state state-' + state, text: state});
}
function status(text, isError) {
  const p = document.getElementById('status');
  p.textContent = text;
  p.className = isError ? 'error' : 'muted';
}
function updated(what) {
  status(what + ' · updated ' + new Date().toLocaleTimeString());
}
function content(...kids) {
  const c = document.getElementById('content');
  c.replaceChildren(...kids);
}
function table(cls, headers, rows) {
  return h('table', {class: cls},
    h('thead', {}, h('tr', {}, ...headers.map((x) => h('th', {class: x.endsWith('#') ? 'num' : '',
                                                             text: x.replace(/#$/, '')})))),
    h('tbody', {}, ...rows));
}
function num(v) { return Number(v || 0); }

// Repeats `tick` every `ms` milliseconds until it returns true (done), showing errors.
function poll(tick, everyMs) {
  let stopped = false;
  const run = async () => {
    try {
      stopped = (await tick()) === true;
    } catch (e) {
      status('error: ' + e.message, true);
    }
    if (!stopped) setTimeout(run, everyMs);
  };
  run();
}

// Jobs ---------------------------------------------------------------------------------------

function eta(j) {
  const done = num(j.trials_done), total = num(j.trials_total);
  if (j.state === 'queued') return 'queued';
  if (OVER.has(j.state)) return '—';
  if (!(done > 0) || !(j.started_at > 0)) return '…';
  const elapsed = Date.now() / 1000 - j.started_at;
  return duration(elapsed * Math.max(0, total - done) / done);
}
function bestSoFar(j) {
  if (j.weighted_best_s > 0) return ms(j.weighted_best_s) + (j.tasks.length > 1 ? ' (weighted)' : '');
  const ran = j.tasks.filter((t) => t.best_s > 0);
  if (ran.length === 0) return '—';
  return ran.length + '/' + j.tasks.length + ' workloads ran';
}
function progressCell(j) {
  const done = num(j.trials_done), total = Math.max(1, num(j.trials_total));
  const fill = h('span');
  fill.style.width = Math.min(100, 100 * done / total).toFixed(1) + '%';
  return h('td', {class: 'progress'}, h('span', {class: 'bar'}, fill),
           h('span', {class: 'trials', text: done + '/' + num(j.trials_total)}));
}
// The task scheduler's split: how the job's trials went to its workloads.
function splitBar(tasks) {
  const total = tasks.reduce((a, t) => a + num(t.trials), 0);
  const bar = h('span', {class: 'split', title: tasks.map((t) => num(t.trials) + ' trials: ' + t.workload).join('\n')});
  tasks.forEach((t, i) => {
    const part = h('span');
    part.style.width = (total > 0 ? 100 * num(t.trials) / total : 0).toFixed(2) + '%';
    part.style.background = COLORS[i % COLORS.length];
    bar.append(part);
  });
  return bar;
}

function jobsPage() {
  let last = '', lastMinute = 0;
  poll(async () => {
    const data = await get('/api/v1/jobs?view=summary');
    performance.mark('tf-fetched');
    // Unchanged: keep the table (ETAs are redrawn once a minute).
    const minute = Math.floor(Date.now() / 60000);
    if (data.text === last && minute === lastMinute) {
      updated((data.jobs || []).length + ' jobs');
      return false;
    }
    last = data.text;
    lastMinute = minute;
    const jobs = (data.jobs || []).slice().reverse();  // newest first
    const counts = {};
    for (const j of jobs) counts[j.state] = (counts[j.state] || 0) + 1;
    const rows = jobs.map((j) => h('tr', {'data-job-id': j.id},
      h('td', {}, h('a', {href: '/jobs/' + j.id, text: '#' + j.id})),
      h('td', {text: j.user}),
      stateCell(j.state),
      progressCell(j),
      h('td', {class: 'best', text: bestSoFar(j)}),
      h('td', {class: 'eta', text: eta(j)}),
      h('td', {}, j.tasks.length > 1 ? splitBar(j.tasks) : null,
        h('span', {class: 'muted', text: j.model ? ' ' + j.model : (j.tasks.length === 1 ? '' : ' ' + j.tasks.length + ' workloads')}),
        j.tasks.length === 1 ? h('span', {class: 'wl', text: j.tasks[0].workload}) : null),
      h('td', {class: 'mono', text: j.key + (j.target ? ' · ' + j.target : '')}),
      h('td', {text: utc(j.submitted_at)})));
    content(
      h('p', {id: 'counts', text: jobs.length + ' jobs: ' +
        ['running', 'queued', 'done', 'failed', 'cancelled'].map((k) => (counts[k] || 0) + ' ' + k).join(', ')}),
      table('jobs', ['Job', 'User', 'State', 'Progress', 'Best so far', 'ETA', 'Workloads', 'Board key · target',
                     'Submitted (UTC)'], rows));
    updated(jobs.length + ' jobs');
    performance.mark('tf-rendered');
    return false;
  }, 2000);
}

// One job ------------------------------------------------------------------------------------

function curve(task, recs, color) {
  const W = 560, H = 220, L = 58, R = 12, T = 10, B = 30;
  const ok = [], errs = [];
  recs.forEach((r, i) => {
    const m = r.error_code === 'ok' && r.correctness !== 'wrong' ? median(r.samples_s) : 0;
    if (m > 0) ok.push([i + 1, m]); else errs.push(i + 1);
  });
  const n = Math.max(recs.length, 1);
  // A log scale: the first candidates are often 10-100x slower than the best ones.
  const ys = ok.map((p) => p[1]).concat(task.default_s > 0 ? [task.default_s] : []);
  const lo = ys.length ? Math.min(...ys) / 1.1 : 1e-4, hi = ys.length ? Math.max(...ys) * 1.1 : 1e-3;
  const span = Math.max(Math.log10(hi / lo), 0.05);
  const x = (i) => L + (W - L - R) * (n <= 1 ? 0.5 : (i - 1) / (n - 1));
  const y = (v) => T + (H - T - B) * (1 - Math.log10(v / lo) / span);
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, 'data-workload': task.workload, 'data-points': recs.length,
                        'data-best': task.best_s, role: 'img', 'aria-label': 'tuning curve of ' + task.workload});
  for (let k = 0; k <= 4; ++k) {
    const v = lo * Math.pow(10, span * k / 4);
    svg.append(s('line', {class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v)}),
               s('text', {x: L - 6, y: y(v) + 3, 'text-anchor': 'end', text: (v * 1e3).toPrecision(3)}));
  }
  svg.append(s('line', {class: 'axis', x1: L, x2: L, y1: T, y2: H - B}),
             s('line', {class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B}),
             s('text', {x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle', text: 'measurement (' + recs.length + ')'}),
             s('text', {x: 12, y: (T + H - B) / 2, transform: `rotate(-90 12 ${(T + H - B) / 2})`,
                        'text-anchor': 'middle', text: 'ms per call (log)'}));
  if (task.default_s > 0) {
    svg.append(s('line', {class: 'default', x1: L, x2: W - R, y1: y(task.default_s), y2: y(task.default_s)}),
               s('text', {x: W - R, y: y(task.default_s) - 3, 'text-anchor': 'end', text: 'default'}));
  }
  for (const [i, v] of ok) svg.append(s('circle', {class: 'pt', cx: x(i), cy: y(v), r: 2}));
  for (const i of errs) svg.append(s('line', {class: 'err', x1: x(i), x2: x(i), y1: H - B, y2: H - B - 6}));
  let best = Infinity, d = '';
  for (const [i, v] of ok) {
    if (v < best) {
      d += (d ? ` L${x(i)},${y(best)} ` : 'M') + `${x(i)},${y(v)}`;
      best = v;
    }
  }
  if (d) {
    d += ` L${x(n)},${y(best)}`;
    const path = s('path', {class: 'best', d});
    path.style.stroke = color;
    svg.append(path);
  }
  return h('div', {class: 'curve'},
    h('h3', {class: 'wl', text: task.workload}),
    h('div', {class: 'muted', text: `best ${ms(task.best_s)}` + (task.default_s > 0 && task.best_s > 0 ?
      ` · ${(task.default_s / task.best_s).toFixed(2)}x the default` : '') + ` · ${num(task.trials)} trials, ` +
      `${num(task.errors)} errors`}),
    svg);
}

function jobPage() {
  const id = document.body.dataset.job;
  const recs = [];
  let lastId = 0, last = '';
  poll(async () => {
    const job = await get('/api/v1/jobs/' + id);
    for (;;) {
      const page = await get(`/api/v1/jobs/${id}/records?after_id=${lastId}`);
      recs.push(...page.records);
      lastId = Number(page.last_id);
      if (!page.more) break;
    }
    if (job.text + recs.length === last) {  // nothing new: keep what is drawn
      updated(recs.length + ' measurements');
      return OVER.has(job.state);
    }
    last = job.text + recs.length;
    const byWorkload = new Map();
    for (const r of recs) {
      if (!byWorkload.has(r.workload)) byWorkload.set(r.workload, []);
      byWorkload.get(r.workload).push(r);
    }
    const fact = (k, v, cls) => h('div', {class: cls}, h('b', {text: k}), String(v));
    const facts = h('div', {class: 'facts'},
      fact('State', job.state, 'state state-' + job.state),
      fact('User', job.user),
      fact('Trials', num(job.trials_done) + ' / ' + num(job.trials_total), 'job-trials'),
      fact('Errors', num(job.errors)),
      fact('Best so far (weighted)', ms(job.weighted_best_s), 'job-best'),
      fact('ETA', eta(job)),
      fact('Board key', job.key),
      fact('Target', job.target || '(the boards\' own)'),
      fact('Strategy', job.strategy),
      fact('Model', job.model || '—'),
      fact('Submitted (UTC)', utc(job.submitted_at)),
      fact('Started (UTC)', utc(job.started_at)),
      fact('Finished (UTC)', utc(job.finished_at)),
      fact('Priority · restarts', job.priority + ' · ' + job.restarts));
    const rows = job.tasks.map((t, i) => h('tr', {'data-workload': t.workload},
      h('td', {}, h('span', {class: 'swatch', text: '■ '}), h('span', {class: 'wl', text: t.workload})),
      h('td', {class: 'num', text: t.weight}),
      h('td', {class: 'num trials', text: num(t.trials)}),
      h('td', {class: 'num', text: num(t.errors)}),
      h('td', {class: 'num best', text: ms(t.best_s)}),
      h('td', {class: 'num', text: t.best_gflops > 0 ? t.best_gflops.toFixed(1) : '—'}),
      h('td', {class: 'num', text: ms(t.default_s)}),
      h('td', {class: 'num', text: t.default_s > 0 && t.best_s > 0 ? (t.default_s / t.best_s).toFixed(2) + 'x' : '—'}),
      h('td', {text: t.done ? 'done' + (t.stop_reason ? ' (' + t.stop_reason + ')' : '') : 'tuning'}),
      h('td', {}, h('code', {text: t.best_config || '—'}))));
    rows.forEach((r, i) => { r.querySelector('.swatch').style.color = COLORS[i % COLORS.length]; });
    const errors = recs.filter((r) => r.error_code !== 'ok' || r.correctness === 'wrong').slice(-20).reverse();
    content(
      job.reason ? h('p', {class: job.state === 'failed' ? 'error' : 'muted', text: job.reason}) : '',
      facts,
      h('h2', {text: 'Workloads'}),
      job.tasks.length > 1 ? h('p', {}, 'How the task scheduler split the trials: ', splitBar(job.tasks)) : '',
      table('tasks', ['Workload', 'Weight#', 'Trials#', 'Errors#', 'Best#', 'GFLOPS#', 'Default#', 'Speedup#',
                      'Search', 'Best config'], rows),
      h('h2', {text: 'Tuning curves'}),
      h('div', {class: 'curves'}, ...job.tasks.map((t, i) => curve(t, byWorkload.get(t.workload) || [],
                                                                   COLORS[i % COLORS.length]))),
      h('h2', {text: 'Errors' + (errors.length ? ' (latest ' + errors.length + ')' : '')}),
      errors.length ? table('errors', ['When (UTC)', 'Workload', 'Error', 'Message', 'Config'], errors.map((r) =>
        h('tr', {}, h('td', {text: utc(r.measured_at)}), h('td', {class: 'wl', text: r.workload}),
          h('td', {text: r.correctness === 'wrong' ? 'wrong answer' : r.error_code}),
          h('td', {text: (r.error_msg || '').slice(0, 300)}), h('td', {}, h('code', {text: JSON.stringify(r.config)})))))
        : h('p', {class: 'muted', text: 'none'}),
      h('p', {class: 'downloads'}, h('a', {href: '/api/v1/jobs/' + id, text: 'job (JSON)'}),
        ...job.tasks.flatMap((t) => t.runs.map((u) => h('a', {href: '/api/v1/history?run=' + encodeURIComponent(u),
                                                              text: 'records of run ' + u.slice(0, 8) + ' (JSON lines)'})))));
    updated(recs.length + ' measurements');
    performance.mark('tf-rendered');
    return OVER.has(job.state);
  }, 1000);
}

// Farm ---------------------------------------------------------------------------------------

function farmPage() {
  poll(async () => {
    const f = await get('/api/v1/farm');
    const mpm = f.measurements_per_minute || {};
    const keys = (f.summary && f.summary.keys) || [];
    const boards = (f.summary && f.summary.boards) || [];
    const keyRows = keys.map((k) => h('tr', {'data-key': k.key},
      h('td', {class: 'mono', text: k.key}), h('td', {class: 'num', text: k.total}), h('td', {class: 'num', text: k.free}),
      h('td', {class: 'num', text: k.leased}), h('td', {class: 'num', text: k.pending}),
      h('td', {class: 'num', text: num(mpm[k.key])})));
    if (f.local_boards > 0) {
      keyRows.push(h('tr', {'data-key': 'local'}, h('td', {class: 'mono', text: 'local (this service)'}),
        h('td', {class: 'num', text: f.local_boards}), h('td', {class: 'num', text: '—'}), h('td', {class: 'num', text: '—'}),
        h('td', {class: 'num', text: '—'}), h('td', {class: 'num', text: num(mpm.local)})));
    }
    const boardRows = boards.map((b) => h('tr', {'data-board': b.board_id},
      h('td', {class: 'mono', text: b.board_id}), h('td', {class: 'mono', text: b.key}), stateCell(b.state),
      h('td', {text: b.lease_holder || '—'}), h('td', {class: 'mono', text: b.target}),
      h('td', {text: [b.device && (b.device.gpu_name || b.device.cpu_model), b.device && b.device.cores ?
        b.device.cores + ' cores' : ''].filter(Boolean).join(', ')}),
      h('td', {class: 'num', text: (num(b.last_heartbeat_ms_ago) / 1000).toFixed(1) + ' s ago'}),
      h('td', {class: 'mono', text: b.address})));
    content(
      h('p', {class: f.error ? 'error' : 'muted', text: f.error ? 'the tracker did not answer: ' + f.error :
        f.tracker ? 'tracker ' + f.tracker : 'no tracker: this service measures on its own ' + f.local_boards +
        ' local board(s)'}),
      h('h2', {text: 'Keys'}),
      table('keys', ['Key', 'Boards#', 'Free#', 'Leased#', 'Waiting leases#', 'Measurements/min#'], keyRows),
      h('p', {class: 'muted', text: 'Measurements per minute: records the service\'s database received in the last ' +
        'minute, per board key (records do not name the board).'}),
      h('h2', {text: 'Boards (' + boards.length + ')'}),
      boards.length ? table('boards', ['Board', 'Key', 'State', 'Holder', 'Target', 'Device', 'Last heartbeat#',
                                       'Address'], boardRows) : h('p', {class: 'muted', text: 'none registered'}));
    updated(boards.length + ' boards');
    performance.mark('tf-rendered');
    return false;
  }, 3000);
}

// Results ------------------------------------------------------------------------------------

function resultsPage() {
  poll(async () => {
    const [pairs, models, stats] = await Promise.all([get('/api/v1/best-per-pair'), get('/api/v1/models'),
                                                      get('/api/v1/stats')]);
    const recs = (pairs.records_json || []).map((l) => JSON.parse(l));
    const rows = recs.map((r) => {
      const m = median(r.samples_s);
      const q = 'workload=' + encodeURIComponent(r.workload) + '&target=' + encodeURIComponent(r.target);
      return h('tr', {'data-workload': r.workload, 'data-target': r.target},
        h('td', {class: 'wl', text: r.workload}), h('td', {class: 'mono', text: r.target}),
        h('td', {class: 'mono', text: r.device_key}), h('td', {class: 'mono', text: r.template}),
        h('td', {class: 'num best', text: ms(m)}),
        h('td', {class: 'num', text: m > 0 ? (r.flops / m / 1e9).toFixed(1) : '—'}),
        h('td', {text: utc(r.measured_at)}), h('td', {}, h('code', {text: JSON.stringify(r.config)})),
        h('td', {}, h('a', {href: '/api/v1/history?' + q, text: 'records'})));
    });
    const modelRows = (models.models || []).map((m) => h('tr', {'data-model': m.model},
      h('td', {class: 'mono', text: m.model}), h('td', {class: 'mono', text: m.target}),
      h('td', {class: 'num', text: ms(m.default_s)}), h('td', {class: 'num tuned', text: ms(m.tuned_s)}),
      h('td', {class: 'num', text: m.speedup > 0 ? m.speedup.toFixed(2) + 'x' : '—'}),
      h('td', {class: 'num', text: ms(m.estimate_s)}),
      h('td', {class: 'num', text: m.tuned_kernels + '/' + m.tunable_kernels}), h('td', {text: utc(m.measured_at)})));
    content(
      h('p', {class: 'muted', id: 'stats', text: `${num(stats.records)} records of ${num(stats.workloads)} workloads ` +
        `on ${num(stats.targets)} targets from ${num(stats.runs)} runs; database ${(num(stats.file_bytes) / 1048576).toFixed(1)} MiB`}),
      h('p', {class: 'downloads'}, h('a', {href: '/api/v1/history?limit=1000000', text: 'Download the records (JSON lines, the first million)'})),
      h('h2', {text: 'Best config per workload and target'}),
      rows.length ? table('best', ['Workload', 'Target', 'Key', 'Template', 'Median#', 'GFLOPS#', 'Measured (UTC)',
                                   'Config', ''], rows) : h('p', {class: 'muted', text: 'no records yet'}),
      h('h2', {text: 'Models'}),
      modelRows.length ? table('models', ['Model', 'Target', 'Default#', 'Tuned#', 'Speedup#', 'Estimate#',
                                          'Kernels tuned#', 'Measured (UTC)'], modelRows)
        : h('p', {class: 'muted', text: 'no model results (tune --model records them)'}));
    updated(recs.length + ' workload/target pairs');
    performance.mark('tf-rendered');
    return false;
  }, 10000);
}

const page = document.body.dataset.page;
for (const a of document.querySelectorAll('nav a')) {
  if (a.dataset.nav === (page === 'job' ? 'jobs' : page)) a.classList.add('active');
}
({jobs: jobsPage, job: jobPage, farm: farmPage, results: resultsPage})[page]();
