/* posttrain view: the browser side of the local run viewer.
   Reads the JSON API under /api (same origin) and draws curves as inline SVG.
   No libraries; every piece of data is inserted as text, never as HTML. */
'use strict';

// ---------------------------------------------------------------- helpers

const $ = (id) => document.getElementById(id);
const SVG_NS = 'http://www.w3.org/2000/svg';
const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
const VERSION_HUES = [210, 30, 130, 280, 0, 175, 55, 320];
const PAGE = 50;        // episodes per page
const POLL_MS = 2000;   // metrics polling period

/** A new element ("svg:" prefix for SVG); attributes via setAttribute, text via textContent. */
function el(tag, attrs = {}, text) {
  const node = tag.startsWith('svg:')
    ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** Numbers with 3 decimals where fractional; other values as text. */
function fmt(v) {
  if (v === null || v === undefined) return '–';
  if (typeof v !== 'number') return String(v);
  return Number.isInteger(v) ? String(v) : v.toFixed(3);
}

/** A "key value" pair for the fact lines above episodes and groups. */
function fact(key, value) {
  const span = el('span', {class: 'fact'});
  span.append(el('b', {}, key), ' ', fmt(value));
  return span;
}

/** A legend entry: a colour swatch and a label. */
function legendItem(colour, label, attrs = {}) {
  const item = el('span', {class: 'legend-item', ...attrs});
  const box = el('span', {class: 'swatch'});
  box.style.background = colour;
  item.append(box, label);
  return item;
}

function showError(msg) {
  const box = $('error');
  box.textContent = msg;
  box.hidden = !msg;
}

/** GET a JSON path; on any failure show it in #error and return null (never throws). */
async function api(path) {
  try {
    const res = await fetch(path);
    if (!res.ok) throw new Error(`${res.status} ${res.statusText} ${(await res.text()).slice(0, 200)}`);
    return await res.json();
  } catch (err) {
    showError(`${path}: ${err && err.message ? err.message : err}`);
    return null;
  }
}

function debounce(fn, ms) {
  let timer;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

/** [min, max] of an array without spreading it (long series would overflow the stack). */
function extent(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
  return [lo, hi];
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------- state

const state = {
  runs: [],              // as listed by /api/runs
  selected: new Set(),   // run ids (strings) drawn in the curve and polled
  data: new Map(),       // run id -> {next, busy, series: Map(name -> [[step, value]]), steps: Map(stage -> Set)}
  names: new Set(),      // every metric name seen in any run
  metric: null,
  userPickedMetric: false,
  epRun: null,           // run whose episodes are browsed
  offset: 0,
  total: 0,
  episode: null,         // {run, ep} currently open
  groupRun: null,        // run of the group shown
  tokens: [],            // [span, token] of the open episode, for recolouring
  versions: [],          // sorted versions seen in the open episode
  warnings: new Map(),   // run id -> the newest lines the server skipped
  skipped: new Map(),    // run id -> how many lines the server skipped in all
  polls: 0,
};

const runColour = (id) => PALETTE[Math.max(0, state.runs.findIndex((r) => String(r.id) === id)) % PALETTE.length];
const runName = (id) => { const r = state.runs.find((x) => String(x.id) === id); return r ? r.name : id; };

// ---------------------------------------------------------------- runs and metrics

async function loadRuns() {
  const res = await api('/api/runs');
  if (!res) return;
  state.runs = res.runs || [];
  const box = $('runs');
  box.replaceChildren();
  if (!state.runs.length) box.append(el('span', {class: 'muted'}, 'No runs found.'));
  for (const run of state.runs) {
    const id = String(run.id);
    state.selected.add(id);
    state.data.set(id, {next: 0, busy: false, series: new Map(), steps: new Map()});
    const label = el('label', {class: 'run', title: `${run.path} · stages: ${(run.stages || []).join(', ')}`});
    const toggle = el('input', {type: 'checkbox', class: 'run-toggle', 'data-run': id, checked: ''});
    const swatch = el('span', {class: 'swatch'});
    swatch.style.background = runColour(id);
    const status = el('span', {class: 'run-status muted', 'data-run': id});
    label.append(toggle, swatch, run.name, status);
    box.append(label);
    showWaiting(id, run.metrics === false);
  }
  const options = () => state.runs.map((r) => el('option', {value: String(r.id)}, r.name));
  $('episode-run').replaceChildren(...options());
  $('summary-run').replaceChildren(...options());
  state.epRun = state.runs.length ? String(state.runs[0].id) : null;
}

/** summary.json and the config of the run chosen, as JSON text. */
async function loadRunFiles() {
  const id = $('summary-run').value;
  if (id === '' || !$('run-files').open) return;
  const res = await api(`/api/runs/${enc(id)}/summary`);
  if (!res) return;
  $('run-summary').textContent = JSON.stringify({summary: res.summary, config: res.config}, null, 2);
}

/** Say beside a run's name that it has no metric rows yet (a run that has just started). */
function showWaiting(id, waiting) {
  const status = document.querySelector(`.run-status[data-run="${id}"]`);
  if (status) status.textContent = waiting ? ' · waiting for its first metrics' : '';
}

/** Note a run's skipped lines (the server's newest warnings and its count of them all). */
function noteSkipped(id, res) {
  if (!Array.isArray(res.warnings)) return;
  state.warnings.set(id, res.warnings);
  state.skipped.set(id, typeof res.skipped === 'number' ? res.skipped : res.warnings.length);
  showWarnings();
}

function showWarnings() {
  const lines = [];
  for (const [id, list] of state.warnings) for (const w of list) lines.push(`${runName(id)}: ${w}`);
  let total = 0;
  for (const n of state.skipped.values()) total += n;
  const head = `${total} skipped line${total === 1 ? '' : 's'}` + (total > lines.length ? ' (the newest shown)' : '');
  $('warnings').textContent = lines.length ? `${head}:\n${lines.join('\n')}` : '';
  $('warnings').hidden = !lines.length;
}

/** Fetch the metric rows a run appended since the last poll. */
async function pollRun(id) {
  const d = state.data.get(id);
  if (!d || d.busy) return;
  d.busy = true;
  const res = await api(`/api/runs/${enc(id)}/metrics?after=${d.next}`);
  d.busy = false;
  if (!res || !Array.isArray(res.rows)) return;
  d.next = typeof res.next === 'number' ? res.next : d.next + res.rows.length;
  showWaiting(id, d.next === 0);
  noteSkipped(id, res);
  if (!res.rows.length) return;
  for (const row of res.rows) addRow(d, row);
  refreshMetricSelect();
  drawCurves();
}

/** Split a metrics row into stage-scoped series ("rl/reward"); only numbers are metrics. */
function addRow(d, row) {
  const stage = row.stage ?? 'run';
  if (typeof row.step !== 'number') return;
  if (!d.steps.has(stage)) d.steps.set(stage, new Set());
  d.steps.get(stage).add(row.step);
  // time: when the row was written (Unix seconds), the time axis; not a metric
  const time = typeof row.time === 'number' ? row.time : null;
  if (time !== null && d.t0 === undefined) d.t0 = time;
  for (const [key, value] of Object.entries(row)) {
    if (key === 'stage' || key === 'step' || key === 'time' || typeof value !== 'number' || !Number.isFinite(value)) continue;
    const name = `${stage}/${key}`;
    if (!d.series.has(name)) d.series.set(name, []);
    d.series.get(name).push([row.step, value, time]);
    state.names.add(name);
  }
}

function refreshMetricSelect() {
  const sel = $('metric-select');
  if (sel.options.length === state.names.size) return;  // names only ever grow
  const names = [...state.names].sort();
  if (!state.userPickedMetric || !state.names.has(state.metric)) {
    state.metric = state.names.has('rl/reward') ? 'rl/reward' : names[0];
  }
  sel.replaceChildren(...names.map((n) => el('option', {value: n}, n)));
  sel.value = state.metric;
}

// ---------------------------------------------------------------- curve

/** Exponential moving average; w is the weight of the previous average (0 = raw). */
function ema(points, w) {
  let avg = null;
  return points.map(([x, v, ...rest]) => [x, (avg = avg === null ? v : w * avg + (1 - w) * v), ...rest]);
}

/** Round tick values covering [lo, hi]; the domain grows to the outer ticks. */
function niceAxis(lo, hi, count, integer) {
  if (lo === hi) { const pad = Math.abs(lo) * 0.1 || 1; lo -= pad; hi += pad; }
  let step = 10 ** Math.floor(Math.log10((hi - lo) / count));
  const err = (hi - lo) / count / step;
  step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
  if (integer) step = Math.max(1, step);
  lo = Math.floor(lo / step) * step;
  hi = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let v = lo; v <= hi + step / 2; v += step) ticks.push(+v.toPrecision(12));
  return {lo, hi, ticks, label: (v) => String(+v.toPrecision(6))};
}

/** Log axis over log10 values: ticks at powers of ten. */
function logAxis(lo, hi) {
  lo = Math.floor(lo); hi = Math.ceil(hi);
  if (lo === hi) hi += 1;
  const every = Math.ceil((hi - lo) / 8), ticks = [];
  for (let e = lo; e <= hi; e += every) {
    ticks.push(e);
    if (hi - lo <= 2 && e < hi) ticks.push(e + Math.log10(2), e + Math.log10(5));  // few decades: 2x, 5x too
  }
  return {lo, hi, ticks, label: (e) => String(+(10 ** e).toPrecision(6))};
}

/** The series of metric `name` per selected run: [{id, raw, smooth, sparse}] with points
 *  [x, value] (x: the step, or minutes since the run's first row on the time axis). A series
 *  logged at only some of its stage's steps (held-out evals) is sparse: drawn as markers at
 *  its raw values, never smoothed (smoothing moved a 1.0 to 0.9936). */
function seriesOf(name, w, logy) {
  const lines = [], byTime = $('x-axis').value === 'time';
  for (const run of state.runs) {
    const id = String(run.id), d = state.data.get(id);
    if (!name || !state.selected.has(id) || !d || !d.series.has(name)) continue;
    const all = d.series.get(name);
    const raw = all.filter((p) => (!logy || p[1] > 0) && (!byTime || p[2] !== null))
      .map((p) => [byTime ? (p[2] - d.t0) / 60 : p[0], p[1], p[0]])
      .sort((a, b) => a[0] - b[0]);
    if (!raw.length) continue;
    const stageSteps = d.steps.get(name.split('/')[0]);
    const sparse = raw.length < 2 || all.length < (stageSteps ? stageSteps.size : 0);
    lines.push({id, raw, smooth: w > 0 && !sparse ? ema(raw, w) : raw, sparse});
  }
  return lines;
}

/** Draw metric `name` into `svg` (width W, height H); the chart keeps what the hover
 *  readout needs. */
function drawChart(svg, name, W, H) {
  svg.replaceChildren();
  const M = {l: 64, r: 12, t: 10, b: 36};
  const w = Number($('smoothing').value), logy = $('logy').checked;
  const ty = logy ? Math.log10 : (v) => v;
  const lines = seriesOf(name, w, logy);
  svg.chart = null;
  if (!lines.length) {
    svg.append(el('svg:text', {x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty'},
      name ? `no ${logy ? 'positive ' : ''}data for ${name}` : 'no metrics yet'));
    return lines;
  }
  const [x0, x1] = extent(lines.flatMap((l) => l.raw.map((p) => p[0])));
  const [y0, y1] = extent(lines.flatMap((l) => l.raw.map((p) => ty(p[1]))));
  const byTime = $('x-axis').value === 'time';
  const xa = niceAxis(x0, x1, W > 600 ? 8 : 4, !byTime), ya = logy ? logAxis(y0, y1) : niceAxis(y0, y1, H > 300 ? 6 : 4, false);
  const sx = (v) => M.l + (v - xa.lo) / (xa.hi - xa.lo) * (W - M.l - M.r);
  const sy = (v) => H - M.b - (v - ya.lo) / (ya.hi - ya.lo) * (H - M.t - M.b);
  for (const t of xa.ticks) {
    svg.append(el('svg:line', {class: 'grid', x1: sx(t), x2: sx(t), y1: M.t, y2: H - M.b}));
    svg.append(el('svg:text', {class: 'tick', x: sx(t), y: H - M.b + 16, 'text-anchor': 'middle'}, xa.label(t)));
  }
  for (const t of ya.ticks) {
    svg.append(el('svg:line', {class: 'grid', x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t)}));
    svg.append(el('svg:text', {class: 'tick', x: M.l - 6, y: sy(t) + 4, 'text-anchor': 'end'}, ya.label(t)));
  }
  svg.append(el('svg:rect', {class: 'frame', x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b}));
  svg.append(el('svg:text', {class: 'axis-title', x: (M.l + W - M.r) / 2, y: H - 4, 'text-anchor': 'middle'},
    byTime ? 'wall time (min)' : 'step'));
  svg.append(el('svg:text', {class: 'axis-title', x: 12, y: (M.t + H - M.b) / 2, 'text-anchor': 'middle',
    transform: `rotate(-90 12 ${(M.t + H - M.b) / 2})`}, name + (logy ? ' (log)' : '')));
  const pathOf = (pts) => pts.map((p, i) => `${i ? 'L' : 'M'}${sx(p[0]).toFixed(1)},${sy(ty(p[1])).toFixed(1)}`).join('');
  for (const line of lines) {
    const colour = runColour(line.id);
    if (w > 0 && !line.sparse) svg.append(el('svg:path', {class: 'raw', 'data-run': line.id, d: pathOf(line.raw), stroke: colour}));
    const path = el('svg:path', {class: 'series', 'data-run': line.id, d: pathOf(line.smooth), stroke: colour});
    path.append(el('svg:title', {}, runName(line.id)));
    svg.append(path);
    if (line.sparse) {
      for (const [x, v, step] of line.raw) {
        const dot = el('svg:circle', {class: 'marker', 'data-run': line.id, cx: sx(x), cy: sy(ty(v)), r: 3.5, fill: colour});
        dot.append(el('svg:title', {}, `${runName(line.id)} · step ${step} · ${fmt(v)}`));
        svg.append(dot);
      }
    }
  }
  svg.chart = {name, lines, W, M, xa};
  return lines;
}

/** The main chart, or with a grid filter every metric whose name holds it, side by side. */
function drawCurves() {
  const legend = $('curve-legend'), grid = $('curve-grid'), filter = $('grid-filter').value.trim();
  legend.replaceChildren();
  const shown = new Set();
  if (filter) {
    $('curve').style.display = 'none';  // (an svg has no hidden property)
    const names = [...state.names].filter((n) => n.includes(filter)).sort().slice(0, 36);
    if (!names.length) {  // say so, rather than an empty area
      grid.replaceChildren(el('div', {id: 'grid-empty', class: 'muted'},
        state.names.size ? `no metric matches "${filter}"` : 'no metrics yet'));
      return;
    }
    grid.replaceChildren(...names.map((n) => {
      const svg = el('svg:svg', {viewBox: '0 0 480 240', class: 'small-chart', role: 'img', 'aria-label': n});
      for (const line of drawChart(svg, n, 480, 240)) shown.add(line.id);
      return svg;
    }));
  } else {
    $('curve').style.display = '';
    grid.replaceChildren();
    for (const line of drawChart($('curve'), state.metric, 960, 360)) shown.add(line.id);
  }
  for (const id of shown) legend.append(legendItem(runColour(id), runName(id), {'data-run': id}));
}

/** Under the pointer: each run's value nearest the x it points at, in the readout line. */
function readout(event) {
  const svg = event.target.closest('svg');
  const chart = svg && svg.chart;
  if (!chart) return;
  const box = svg.getBoundingClientRect();
  const px = (event.clientX - box.left) / box.width * chart.W;
  const x = chart.xa.lo + (px - chart.M.l) / (chart.W - chart.M.l - chart.M.r) * (chart.xa.hi - chart.xa.lo);
  const parts = chart.lines.map((line) => {
    let best = line.smooth[0];
    for (const p of line.smooth) if (Math.abs(p[0] - x) < Math.abs(best[0] - x)) best = p;
    return `${runName(line.id)}: ${fmt(best[1])} at step ${best[2]}`;
  });
  $('readout').textContent = `${chart.name} · ${parts.join(' · ')}`;
}

// ---------------------------------------------------------------- episode list

function episodeQuery() {
  const val = (id) => $(id).value.trim();
  return new URLSearchParams({
    offset: state.offset, limit: PAGE, sort: val('sort'), finish: val('filter-finish'), task: val('filter-task'),
    q: val('filter-q'), step_min: val('filter-step-min'), step_max: val('filter-step-max'),
    reward_min: val('filter-reward-min'), reward_max: val('filter-reward-max'),
    length_min: val('filter-length-min'), length_max: val('filter-length-max'),
    response: val('filter-response'), traced: val('filter-traced'),
  }).toString();
}

/** Refill a filter select with `values` ("all" first), keeping its choice where it still is. */
function refill(id, values) {
  const box = $(id), chosen = box.value;
  box.replaceChildren(el('option', {value: ''}, 'all'), ...values.map((t) => el('option', {value: t}, t)));
  box.value = values.includes(chosen) ? chosen : '';
}

let listSeq = 0;  // only the newest answer is shown
async function loadEpisodes() {
  if (state.epRun === null) return;
  const seq = ++listSeq;
  const res = await api(`/api/runs/${enc(state.epRun)}/episodes?${episodeQuery()}`);
  if (!res || seq !== listSeq) return;
  state.total = res.total || 0;
  // The task and finish filters offer what the run's episodes name (their choices kept).
  refill('filter-task', res.tasks || []);
  refill('filter-finish', res.finishes || []);
  const saved = (state.runs.find((r) => String(r.id) === state.epRun) || {}).episodes;
  const count = res.count ?? state.total;
  $('episode-count').textContent = saved === false && !count
    ? 'this run saved no episodes: train it with rl.save_episodes=true'
    : `${state.total} of ${count} episode${count === 1 ? '' : 's'} (${res.traced ?? 0} with token stats)` +
      (res.texts === false ? ' · prompts show once the run has a tokenizer' : '');
  noteSkipped(state.epRun, res);
  const rows = (res.episodes || []).map((ep) => {
    const tr = el('tr', {class: 'episode-row', 'data-index': ep.index});
    for (const v of [ep.index, ep.step, ep.group, ep.reward, ep.finish_reason, ep.length, ep.task,
      ep.traced ? 'yes' : '']) tr.append(el('td', {}, fmt(v)));
    // an agent's question, else the prompt's end (where a chat template puts the question)
    const prompt = String(ep.prompt ?? '').replace(/\s+/g, ' ').trim();
    const shown = ep.question || prompt.length <= 100 ? prompt.slice(0, 100) + (prompt.length > 100 ? '…' : '')
      : '…' + prompt.slice(-100);
    tr.append(el('td', {class: 'prompt', title: prompt}, shown));
    return tr;
  });
  if (!rows.length) {
    const tr = el('tr', {class: 'empty-row'});
    tr.append(el('td', {colspan: 9, class: 'muted'}, 'no matching episodes'));
    rows.push(tr);
  }
  $('episodes').tBodies[0].replaceChildren(...rows);
  const pages = Math.max(1, Math.ceil(state.total / PAGE));
  $('page-info').textContent = `page ${Math.floor(state.offset / PAGE) + 1} / ${pages}`;
  $('prev-page').disabled = state.offset <= 0;
  $('next-page').disabled = state.offset + PAGE >= state.total;
  markActive();
}

/** Highlight the open episode in the table and the group. */
function markActive() {
  const open = state.episode;
  for (const node of document.querySelectorAll('.episode-row, .group-sample')) {
    const run = node.classList.contains('episode-row') ? state.epRun : state.groupRun;
    node.classList.toggle('active', !!open && open.run === run && String(open.ep.index) === node.dataset.index);
  }
}

// ---------------------------------------------------------------- episode view

let episodeSeq = 0;
async function openEpisode(run, index) {
  const seq = ++episodeSeq;
  const ep = await api(`/api/runs/${enc(run)}/episodes/${enc(index)}`);
  if (!ep || seq !== episodeSeq) return;
  state.episode = {run, ep};
  renderEpisode();
  markActive();
  $('episode-section').scrollIntoView({block: 'start'});
}

function tokenTitle(t) {
  if (!t.trained && typeof t.logprob !== 'number') return 'not sampled';
  const parts = [];
  if (typeof t.logprob === 'number') parts.push(`logprob ${t.logprob.toFixed(3)}`);
  if (t.version !== null && t.version !== undefined) parts.push(`version ${t.version}`);
  if (typeof t.advantage === 'number') parts.push(`advantage ${t.advantage.toFixed(3)}`);
  if (typeof t.trainer_logprob === 'number') parts.push(`trainer logprob ${t.trainer_logprob.toFixed(3)}`);
  if (typeof t.mismatch === 'number') parts.push(`mismatch ${t.mismatch.toExponential(1)}`);
  if (typeof t.entropy === 'number') parts.push(`entropy ${t.entropy.toFixed(3)}`);
  parts.push(t.trained ? 'trained' : 'not trained');
  return parts.join(' · ');
}

/** Background of a trained token: logprob 0 light green -> -5 or lower red. */
const logprobColour = (lp) => {
  const x = Math.min(1, Math.max(0, -lp / 5));
  return `hsl(${Math.round(120 * (1 - x))}, 75%, ${Math.round(84 - 10 * x)}%)`;
};
const versionColour = (v) => `hsl(${VERSION_HUES[Math.max(0, state.versions.indexOf(v)) % VERSION_HUES.length]}, 70%, 82%)`;
const MASK_COLOUR = 'hsl(210, 80%, 85%)';
/** Advantage: -2 or lower red, 0 white, 2 or higher blue. */
const advantageColour = (a) => {
  const x = Math.min(1, Math.abs(a) / 2);
  return `hsl(${a < 0 ? 0 : 215}, 80%, ${Math.round(97 - 22 * x)}%)`;
};
/** |behaviour - trainer log-prob| on a log scale: 1e-6 or less green, 1e-1 or more red. */
const mismatchColour = (d) => {
  const x = Math.min(1, Math.max(0, (Math.log10(Math.abs(d) + 1e-12) + 6) / 5));
  return `hsl(${Math.round(120 * (1 - x))}, 75%, ${Math.round(84 - 10 * x)}%)`;
};
/** Entropy of the sampling distribution: 0 nats white, 3 or more purple. */
const entropyColour = (h) => `hsl(275, 70%, ${Math.round(97 - 25 * Math.min(1, h / 3))}%)`;
const VALUE_COLOUR = {advantage: advantageColour, mismatch: mismatchColour, entropy: entropyColour};

function tokenColour(t, mode) {
  if (!t.trained) return '';
  if (mode === 'loss_mask') return MASK_COLOUR;
  if (mode === 'version') return t.version === null || t.version === undefined ? '' : versionColour(t.version);
  if (mode in VALUE_COLOUR) return typeof t[mode] === 'number' ? VALUE_COLOUR[mode](t[mode]) : '';
  return typeof t.logprob === 'number' ? logprobColour(t.logprob) : '';
}

function renderEpisode() {
  const {run, ep} = state.episode;
  const facts = [fact('run', runName(run)), fact('index', ep.index), fact('step', ep.step),
    fact('group', ep.group), fact('reward', ep.reward)];
  for (const [k, v] of Object.entries(ep.rewards || {})) facts.push(fact(`reward ${k}`, v));
  facts.push(fact('finish', ep.finish_reason));
  for (const [k, v] of Object.entries(ep.meta || {})) {
    const text = typeof v === 'object' && v !== null ? JSON.stringify(v) : v;
    if (typeof text === 'string' && text.length > 80) {  // long: click to read it all
      const span = el('span', {class: 'fact'});
      const more = el('details', {class: 'meta-value'});
      more.append(el('summary', {}, text.slice(0, 80) + '…'), el('span', {}, text.slice(80)));
      span.append(el('b', {}, k), ' ', more);
      facts.push(span);
    } else facts.push(fact(k, text));
  }
  $('episode-facts').replaceChildren(...facts);

  state.tokens = [];
  const versions = new Set();
  const segments = (ep.segments || []).map((seg, k) => {
    const box = el('div', {class: 'segment'});
    const text = el('div', {class: 'tokens'});
    for (const tok of seg.tokens || []) {
      const span = el('span', {class: tok.trained ? 'token' : 'token untrained', title: tokenTitle(tok)}, tok.text);
      if (tok.trained && tok.version !== null && tok.version !== undefined) versions.add(tok.version);
      state.tokens.push([span, tok]);
      text.append(span);
    }
    box.append(el('div', {class: 'segment-label'}, `segment ${k}`), text);
    return box;
  });
  state.versions = [...versions].sort((a, b) => (a > b) - (a < b));
  $('segments').replaceChildren(...segments);
  $('open-group').disabled = false;
  colourTokens();
}

function colourTokens() {
  const mode = $('colour-by').value;
  for (const [span, tok] of state.tokens) span.style.backgroundColor = tokenColour(tok, mode);
  // Legend of the scale in use.
  const items = [];
  const gradientItem = (before, colours, after) => {
    const bar = el('span', {class: 'legend-item'});
    const grad = el('span', {class: 'gradient'});
    grad.style.background = `linear-gradient(to right, ${colours.join(', ')})`;
    bar.append(before, grad, after);
    return bar;
  };
  if (mode === 'logprob') {
    items.push(gradientItem('logprob 0 ', [0, -1.25, -2.5, -3.75, -5].map(logprobColour), ' ≤ −5'));
  } else if (mode === 'advantage') {
    items.push(gradientItem('advantage ≤ −2 ', [-2, -1, 0, 1, 2].map(advantageColour), ' ≥ 2'));
  } else if (mode === 'mismatch') {
    items.push(gradientItem('|mismatch| 1e-6 ', [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1].map(mismatchColour), ' ≥ 0.1'));
  } else if (mode === 'entropy') {
    items.push(gradientItem('entropy 0 ', [0, 1, 2, 3].map(entropyColour), ' ≥ 3 nats'));
  } else if (mode === 'loss_mask') {
    items.push(legendItem(MASK_COLOUR, 'trained'));
  } else {
    items.push(...state.versions.map((v) => legendItem(versionColour(v), `version ${v}`)));
  }
  items.push(legendItem('transparent', 'not trained'));
  const ep = state.episode && state.episode.ep;
  if (ep && !ep.token_stats && mode in VALUE_COLOUR) {
    items.push(el('span', {class: 'note'},
      `not traced: this episode carries no ${mode} (rl.token_stats traces a few episodes a step)`));
  }
  $('colour-legend').replaceChildren(...items);
}

// ---------------------------------------------------------------- group view

async function openGroup() {
  if (!state.episode) return;
  const {run, ep} = state.episode;
  const res = await api(`/api/runs/${enc(run)}/groups?step=${enc(ep.step)}&group=${enc(ep.group)}`);
  if (!res) return;
  state.groupRun = run;
  const samples = res.episodes || [];
  $('group-facts').replaceChildren(fact('run', runName(run)), fact('step', ep.step),
    fact('group', ep.group), fact('samples', samples.length), fact('reference', res.reference),
    fact('advantage', res.advantage_source), fact('prompt', res.prompt));
  $('group-samples').replaceChildren(...samples.map((s) => {
    const card = el('div', {class: 'group-sample', 'data-index': s.index});
    if (typeof s.advantage === 'number') card.classList.add(s.advantage > 0 ? 'positive' : s.advantage < 0 ? 'negative' : 'neutral');
    const head = el('div', {class: 'facts'});
    head.append(fact('#', s.index), fact('reward', s.reward),
      fact('advantage', typeof s.advantage === 'number' ? s.advantage.toFixed(3) : s.advantage),
      fact('finish', s.finish_reason), fact('length', s.length));
    card.append(head, el('div', {class: 'response'}, s.response ?? ''));
    return card;
  }));
  markActive();
  $('group-section').scrollIntoView({block: 'start'});
}

// ---------------------------------------------------------------- wiring

function pollAll() {
  for (const id of state.selected) pollRun(id);
  if (++state.polls % 3 === 0) loadEpisodes();  // a live run's counts and rows
}

function wire() {
  $('error').addEventListener('click', () => showError(''));
  $('runs').addEventListener('change', (e) => {
    if (!e.target.classList.contains('run-toggle')) return;
    const id = e.target.dataset.run;
    if (e.target.checked) { state.selected.add(id); pollRun(id); } else state.selected.delete(id);
    drawCurves();
  });
  $('metric-select').addEventListener('change', (e) => {
    state.metric = e.target.value;
    state.userPickedMetric = true;
    drawCurves();
  });
  $('smoothing').addEventListener('input', (e) => {
    $('smoothing-value').textContent = Number(e.target.value).toFixed(2);
    drawCurves();
  });
  $('logy').addEventListener('change', drawCurves);
  $('x-axis').addEventListener('change', drawCurves);
  $('grid-filter').addEventListener('input', debounce(drawCurves, 250));
  for (const id of ['curve', 'curve-grid']) $(id).addEventListener('mousemove', readout);
  $('run-files').addEventListener('toggle', loadRunFiles);
  $('summary-run').addEventListener('change', loadRunFiles);

  // Episode filters: selects re-query at once, typed fields after a pause.
  const requery = () => { state.offset = 0; loadEpisodes(); };
  const typed = debounce(requery, 250);
  for (const id of ['filter-q', 'filter-response', 'filter-step-min', 'filter-step-max', 'filter-reward-min', 'filter-reward-max',
    'filter-length-min', 'filter-length-max']) {
    $(id).addEventListener('input', typed);
  }
  for (const id of ['filter-finish', 'filter-task', 'filter-traced', 'sort']) $(id).addEventListener('change', requery);
  $('episode-run').addEventListener('change', (e) => { state.epRun = e.target.value; requery(); });
  $('prev-page').addEventListener('click', () => { state.offset = Math.max(0, state.offset - PAGE); loadEpisodes(); });
  $('next-page').addEventListener('click', () => { state.offset += PAGE; loadEpisodes(); });
  $('episodes').tBodies[0].addEventListener('click', (e) => {
    const row = e.target.closest('.episode-row');
    if (row) openEpisode(state.epRun, Number(row.dataset.index));
  });

  $('colour-by').addEventListener('change', colourTokens);
  $('open-group').addEventListener('click', openGroup);
  $('group-samples').addEventListener('click', (e) => {
    const card = e.target.closest('.group-sample');
    if (card) openEpisode(state.groupRun, Number(card.dataset.index));
  });
}

async function main() {
  wire();
  colourTokens();
  drawCurves();
  await loadRuns();
  loadEpisodes();
  pollAll();
  setInterval(pollAll, POLL_MS);
}

main().catch((err) => showError(String(err)));
