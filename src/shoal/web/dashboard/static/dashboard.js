// Shoal dashboard: polls the read-only JSON API and renders it (charts with Chart.js).
//
// Every poll asks only for what is on screen (a page of each table, the top queues, one
// queue's history) and passes the version of its last answer to the same query
// (?since=): an unchanged part comes back as {"unchanged": true} and is not re-rendered.
// window.shoalStats keeps per poll the bytes fetched and the main-thread time spent
// parsing and rendering (bench/dashboard_scale.py reads them).
"use strict";

const state = {
  resource: "dominant",
  by: "allocated",
  topN: 15,
  queueQuery: "",
  queuePage: 20,
  queueOffsets: new Map(), // "" (top level), a parent's name, or "?" (a search) -> offset
  toggled: new Map(), // queue -> opened (true) or closed (false) by the user
  selected: "", // the queue clicked: its history, gangs and pending pods
  gangPhase: "",
  gangQuery: "",
  gangOffset: 0,
  gangPage: 10,
  openGang: "",
  gangPodOffset: 0,
  gangPodPage: 20,
  podOffset: 0,
  podPage: 10,
  nodeSort: "frag",
  nodeOffset: 0,
  nodePage: 10,
  refreshMs: 2000,
  charts: {},
  generation: 0,
  rendered: {}, // section -> signature of what it shows
  timer: 0,
  history: true, // the server samples a queue history
};
const OPEN_BELOW = 10; // parents with at most this many children start open
const TREE_DEPTH = 6; // levels fetched below the top (deeper parents: open them)
const views = new Map(); // query URL -> {version, data}: the last answer to each
const hist = { key: "", version: "", times: [], series: null, capacity: 0 }; // the charted queue's history
const heatNames = { version: "", names: null, loading: false };
const stats = (window.shoalStats = { polls: [], longTasks: [], errors: 0 });
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) stats.longTasks.push({ start: e.startTime, ms: e.duration });
  }).observe({ type: "longtask", buffered: true });
} catch (err) { /* no long-task timing in this browser */ }

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({
  "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const pct = (x) => (x == null ? "–" : (100 * x).toFixed(1) + "%");
const COLORS = ["#2f7ed8", "#f28f43", "#1aadce", "#8bbc21", "#910000", "#492970",
  "#77a1e5", "#c42525", "#a6c96a", "#0d233a"];
const SERIES = ["allocated", "guaranteed", "fairShare"];

// Percent ticks with as many decimals as the step between ticks needs: 0.05% steps are
// "0.05%, 0.10%", 2.5% steps "2.5%, 5.0%", so two ticks never read the same.
function pctDecimals(step) {
  const p = Math.abs(step) * 100;
  for (let d = 0; d < 6; d++) {
    const m = p * 10 ** d;
    if (Math.abs(m - Math.round(m)) < 1e-6 * Math.max(1, m)) return d;
  }
  return 6;
}
const PCT2 = [{ value: 0 }, { value: 0.0001 }]; // pctTick with two decimals
function pctTick(value, index, ticks) {
  const step = ticks.length > 1 ? Math.abs(ticks[1].value - ticks[0].value) : Math.abs(value) || 1;
  return (100 * value).toFixed(pctDecimals(step || 1)) + "%";
}

function query(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null) q.set(k, v);
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

// GET `url`, sending the version of the last answer to it; {data, changed}.
async function view(url, poll) {
  poll.used.add(url);
  const last = views.get(url);
  const sent = last ? url + (url.includes("?") ? "&" : "?") + "since=" + encodeURIComponent(last.version) : url;
  const response = await fetch(sent, { cache: "no-store" });
  const text = await response.text();
  poll.requests += 1;
  poll.bytes += Number(response.headers.get("content-length")) || text.length;
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try { message = JSON.parse(text).error || message; } catch (err) { /* not JSON */ }
    const error = new Error(`${url}: ${message}`);
    error.status = response.status;
    throw error;
  }
  const t0 = performance.now();
  const data = JSON.parse(text);
  poll.parseMs += performance.now() - t0;
  if (data.unchanged && last) {
    poll.unchanged += 1;
    return { data: last.data, changed: false };
  }
  views.set(url, { version: data.version, data });
  return { data, changed: true };
}

// Render a section only when what it shows changed (its answers' versions or the UI's
// state): an unchanged poll costs the main thread next to nothing.
function changed(section, ...parts) {
  const signature = JSON.stringify(parts);
  if (state.rendered[section] === signature) return false;
  state.rendered[section] = signature;
  return true;
}

function duration(seconds) {
  if (seconds < 120) return `${seconds.toFixed(0)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(0)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function amounts(map, resource) {
  if (!map) return "";
  if (resource && resource !== "dominant") return map[resource] == null ? "" : short(resource, map[resource]);
  return Object.entries(map).map(([r, v]) => `${r.replace("nvidia.com/", "")} ${short(r, v)}`).join(", ");
}

function short(resource, v) {
  // Queues count cpu and nvidia.com/gpu in thousandths (a GPU share is a fraction).
  if (resource === "cpu" || resource === "nvidia.com/gpu") return `${(v / 1000).toFixed(v % 1000 ? 1 : 0)}`;
  if (resource === "memory") return `${(v / 2 ** 30).toFixed(0)}Gi`;
  return `${v}`;
}

// HH:MM:SS (toLocaleTimeString loads locale data on its first call: tens of ms).
const clockTime = (d) => [d.getHours(), d.getMinutes(), d.getSeconds()].map((v) => String(v).padStart(2, "0")).join(":");

function card(key, value) {
  return `<div class="card"><div class="v">${esc(value)}</div><div class="k">${esc(key)}</div></div>`;
}

function pager(id, offset, shown, total, page, name) {
  const el = $(id);
  if (total <= page && offset === 0) { el.innerHTML = ""; return; }
  const from = total ? offset + 1 : 0;
  el.innerHTML = `<button data-page="${esc(name)}" data-to="${Math.max(0, offset - page)}" aria-label="previous page"` +
    `${offset > 0 ? "" : " disabled"}>‹</button><span>${from}–${offset + shown} of ${total}</span>` +
    `<button data-page="${esc(name)}" data-to="${offset + page}" aria-label="next page"` +
    `${offset + shown < total ? "" : " disabled"}>›</button>`;
}

// Charts and the heat map are drawn when they are (nearly) in view: an update of one
// out of view waits until it scrolls in (the first drawing never waits).
const offscreen = new Set(); // ids of canvases out of view
const deferred = new Map(); // id -> the drawing it waits for
const watcher = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
  for (const e of entries) {
    if (e.isIntersecting) {
      offscreen.delete(e.target.id);
      const draw = deferred.get(e.target.id);
      deferred.delete(e.target.id);
      if (draw) draw();
    } else {
      offscreen.add(e.target.id);
    }
  }
}, { rootMargin: "100px" }) : null;

function whenVisible(id, draw) {
  if (offscreen.has(id)) { deferred.set(id, draw); return; }
  deferred.delete(id);
  draw();
}

function chart(id, config) {
  if (!window.Chart) return null;
  let c = state.charts[id];
  if (c && offscreen.has(id)) { deferred.set(id, () => chart(id, config)); return c; }
  if (!c) {
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    c = state.charts[id] = new Chart($(id), config);
    c.$shoal = "";
    if (watcher) watcher.observe($(id));
  } else {
    const data = JSON.stringify(config.data);
    const plugins0 = JSON.stringify((config.options && config.options.plugins) || {}, (k, v) => (typeof v === "function" ? undefined : v));
    if (c.$shoal === data + plugins0) return c; // nothing new to draw
    c.$shoal = data + plugins0;
    c.data = config.data;
    const plugins = (config.options && config.options.plugins) || {};
    for (const key of ["title", "subtitle"]) {
      if (plugins[key]) Object.assign(c.options.plugins[key], { text: plugins[key].text, display: plugins[key].display });
    }
    c.update("none");
  }
  return c;
}

// ---- summary ----------------------------------------------------------------------

function renderSummary(s) {
  const clock = s.clock === "virtual" ? `t = ${s.time.toFixed(0)} s (simulated)` : "live cluster";
  $("status").textContent = `${clock} · snapshot ${(1000 * s.buildSeconds).toFixed(1)} ms · ` +
    `updated ${clockTime(new Date())}`;
  if (!changed("summary", s.version)) return;
  $("summary").innerHTML = [
    card("nodes", s.nodes), card("GPU nodes", s.gpuNodes), card("pods placed", s.placedPods),
    card("pods pending", s.pendingPods), card("queues", s.queues), card("gangs", s.gangs),
  ].join("");
  if (s.refreshSeconds) state.refreshMs = 1000 * s.refreshSeconds;
}

// ---- queues: the tree, a page per parent -------------------------------------------

function isOpen(q) {
  if (!q.children) return false;
  const toggled = state.toggled.get(q.name);
  return toggled === undefined ? q.children <= OPEN_BELOW : toggled;
}

// The visible part of the tree: the top level (or the search's matches), then the
// children of every open parent, a level at a time. Map: parent key -> {data, changed}.
async function loadTree(poll) {
  const levels = new Map();
  const page = (key, params) => view(query("/dashboard/api/queues", Object.assign(
    { offset: state.queueOffsets.get(key) || 0, limit: state.queuePage }, params)), poll);
  if (state.queueQuery) {
    levels.set("?", await page("?", { q: state.queueQuery }));
    return levels;
  }
  let frontier = [""];
  for (let depth = 0; frontier.length && depth <= TREE_DEPTH; depth++) {
    // A parent removed since the last poll answers 400: its level is left out.
    const answers = await Promise.all(frontier.map((key) => page(key, { parent: key })
      .catch((err) => { if (!key) throw err; return null; })));
    const next = [];
    frontier.forEach((key, i) => {
      if (!answers[i]) return;
      levels.set(key, answers[i]);
      for (const q of answers[i].data.queues) if (isOpen(q)) next.push(q.name);
    });
    frontier = next;
  }
  return levels;
}

function shareOf(q, series, capacity) {
  const r = state.resource;
  if (r === "dominant") return q.share[series];
  const cap = capacity[r] || 0;
  return cap ? (q[series][r] || 0) / cap : 0;
}

function queueRow(x, depth, capacity, search) {
  const r = state.resource === "dominant" ? "" : state.resource;
  const a = shareOf(x, "allocated", capacity);
  const max = Object.keys(x.maximum).length ? amounts(x.maximum, r) || "–" : "–";
  const open = isOpen(x);
  const toggle = x.children
    ? `<button class="tog" data-toggle="${esc(x.name)}" aria-expanded="${open}" aria-label="${open ? "close" : "open"} ${esc(x.name)}">${open ? "▾" : "▸"}</button>`
    : `<button class="tog leaf" tabindex="-1" aria-hidden="true">·</button>`;
  const where = search && x.parent ? ` <span class="sub">in ${esc(x.parent)}</span>` : "";
  const kids = x.children ? ` <span class="sub">${x.children}</span>` : "";
  return `<tr data-queue="${esc(x.name)}"${x.name === state.selected ? ' class="selected"' : ""}>` +
    `<td style="padding-left:${(0.2 + (search ? 0 : 1.1 * depth)).toFixed(1)}em">${toggle}${esc(x.name)}${kids}${where}</td>` +
    `<td class="num">${x.weight}</td>` +
    `<td class="num" title="${esc(amounts(x.allocated, r))}"><span class="bar" style="width:${(Math.min(1, a) * 50).toFixed(0)}px"></span>${pct(a)}</td>` +
    `<td class="num" title="${esc(amounts(x.guaranteed, r))}">${pct(shareOf(x, "guaranteed", capacity))}</td>` +
    `<td class="num" title="${esc(amounts(x.fairShare, r))}">${pct(shareOf(x, "fairShare", capacity))}</td>` +
    `<td class="num">${esc(max)}</td><td class="num">${x.bound}</td><td class="num">${x.running}</td><td class="num">${x.pending}</td></tr>`;
}

function renderTree(levels) {
  const signature = [...levels.entries()].map(([k, v]) => [k, v.data.version, v.data.offset]);
  if (!changed("tree", signature, state.resource, state.selected, [...state.toggled])) return;
  const rows = [];
  let capacity = {};
  const more = (key, data, depth) => {
    if (data.total <= state.queuePage && !data.offset) return;
    const shown = data.queues.length;
    rows.push(`<tr class="more"><td colspan="9" style="padding-left:${(0.2 + 1.1 * depth).toFixed(1)}em">` +
      `<button data-page="queues" data-key="${esc(key)}" data-to="${Math.max(0, data.offset - state.queuePage)}"` +
      ` aria-label="previous page"${data.offset ? "" : " disabled"}>‹</button> ${data.offset + 1}–${data.offset + shown} of ${data.total}` +
      `${key && key !== "?" ? ` in ${esc(key)}` : ""} <button data-page="queues" data-key="${esc(key)}" data-to="${data.offset + state.queuePage}"` +
      ` aria-label="next page"${data.offset + shown < data.total ? "" : " disabled"}>›</button></td></tr>`);
  };
  const walk = (key, depth) => {
    const level = levels.get(key);
    if (!level) return;
    capacity = level.data.capacity;
    for (const x of level.data.queues) {
      rows.push(queueRow(x, depth, capacity, key === "?"));
      if (isOpen(x) && levels.has(x.name)) walk(x.name, depth + 1);
    }
    more(key, level.data, depth);
  };
  const top = levels.get(state.queueQuery ? "?" : "");
  walk(state.queueQuery ? "?" : "", 0);
  $("queue-table").tBodies[0].innerHTML = rows.join("") ||
    `<tr><td colspan="9" class="note">${state.queueQuery ? "no queue matches" : "no queues"}</td></tr>`;
  if (top) {
    const d = top.data;
    $("queue-count").textContent = state.queueQuery ? `${d.total} of ${d.count} match` : `${d.count} in the tree`;
    const resources = ["dominant", ...d.resources];
    const sel = $("resource");
    if ([...sel.options].map((o) => o.value).join() !== resources.join()) {
      sel.innerHTML = resources.map((r) => `<option>${esc(r)}</option>`).join("");
      sel.value = state.resource;
    }
  }
}

const RANK_TITLES = { allocated: "allocated", fairShare: "fair share", guaranteed: "guaranteed",
  pending: "pending pods", running: "running pods" };

function renderTop(top) {
  if (!changed("top", top.version, top.resource, top.by)) return;
  const items = top.items;
  const o = top.others;
  // The rest, summed, is said above the bars, not drawn as one: at 500 queues it would
  // dwarf them.
  const others = o.count
    ? `others (${o.count} queues, summed): allocated ${pctTick(o.allocated, 0, PCT2)}, guaranteed ` +
      `${pctTick(o.guaranteed, 0, PCT2)}, fair share ${pctTick(o.fairShare, 0, PCT2)}` +
      (top.by === "pending" || top.by === "running" ? `, ${o[top.by]} ${top.by} pods` : "")
    : "";
  chart("queue-now", {
    type: "bar",
    data: {
      labels: items.map((x) => x.name),
      datasets: [
        { label: "allocated", data: items.map((x) => x.allocated), backgroundColor: COLORS[0] },
        { label: "guaranteed", data: items.map((x) => x.guaranteed), backgroundColor: "#9aa5b1" },
        { label: "fair share", data: items.map((x) => x.fairShare), backgroundColor: COLORS[1] },
      ],
    },
    options: {
      plugins: {
        title: { display: true, text: `Top ${items.length} of ${top.total} leaf queues by ${RANK_TITLES[top.by]} (${top.resource})` },
        subtitle: { display: !!others, text: others, font: { size: 11 } },
        legend: { labels: { boxWidth: 12 } },
        tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${pctTick(c.parsed.y, 0, PCT2)}` } },
      },
      // sampleSize: measure a few labels, not all, to lay out the axis (queue names are alike).
      scales: { x: { ticks: { autoSkip: false, maxRotation: 60, sampleSize: 6, font: { size: 10 } } },
        y: { beginAtZero: true, ticks: { maxTicksLimit: 6, callback: pctTick } } },
      onClick: (event, elements) => {
        const i = elements.length ? elements[0].index : -1;
        if (i >= 0 && i < items.length) select(items[i].name);
      },
    },
  });
}

// ---- queue history: one queue, appended to -----------------------------------------

async function loadHistory(queue, poll) {
  if (!state.history || !queue) return false;
  const key = `${state.resource}|${queue}`;
  const params = { resource: state.resource, queue };
  const same = hist.key === key && hist.version;
  if (same) {
    params.since = hist.version;
    if (hist.times.length) params.from = hist.times[hist.times.length - 1];
  }
  const response = await fetch(query("/dashboard/api/queues/history", params), { cache: "no-store" });
  const text = await response.text();
  poll.requests += 1;
  poll.bytes += Number(response.headers.get("content-length")) || text.length;
  if (response.status === 404) { state.history = false; return false; }
  if (!response.ok) throw new Error(`queue history: HTTP ${response.status}`);
  const t0 = performance.now();
  const data = JSON.parse(text);
  poll.parseMs += performance.now() - t0;
  if (data.unchanged) { poll.unchanged += 1; return false; }
  const got = data.queues[queue] || {};
  if (same && data.start != null && hist.series) {
    // Keep the samples before `start`, take the rest from the answer.
    let cut = hist.times.findIndex((t) => t >= data.start);
    if (cut < 0) cut = hist.times.length;
    hist.times = hist.times.slice(0, cut).concat(data.times);
    for (const s of SERIES) {
      hist.series[s] = hist.series[s].slice(0, cut).concat(got[s] || data.times.map(() => null));
    }
    const extra = hist.times.length - data.capacity;
    if (extra > 0) {
      hist.times = hist.times.slice(extra);
      for (const s of SERIES) hist.series[s] = hist.series[s].slice(extra);
    }
  } else {
    hist.times = data.times;
    hist.series = {};
    for (const s of SERIES) hist.series[s] = got[s] || data.times.map(() => null);
  }
  hist.key = key;
  hist.version = data.version;
  hist.capacity = data.capacity;
  return true;
}

function renderHistory(queue, clock) {
  if (!changed("history", hist.key, hist.version, queue)) return;
  if (!hist.series) return;
  const wall = clock === "wall";
  const now = hist.times.length ? hist.times[hist.times.length - 1] : 0;
  const labels = hist.times.map((t) => (wall ? -Math.round(now - t) : Math.round(t)));
  const line = (label, data, color, dash) => ({
    label, data: data || [], borderColor: color, backgroundColor: color, borderDash: dash,
    stepped: true, pointRadius: 0, borderWidth: 2, spanGaps: false,
  });
  chart("queue-history", {
    type: "line",
    data: {
      labels,
      datasets: [
        line("allocated", hist.series.allocated, COLORS[0]),
        line("guaranteed", hist.series.guaranteed, "#9aa5b1", [6, 4]),
        line("fair share", hist.series.fairShare, COLORS[1], [2, 2]),
      ],
    },
    options: {
      plugins: { title: { display: true, text: `Queue ${queue} over time (${state.resource})` } },
      scales: {
        x: { title: { display: true, text: wall ? "seconds ago" : "simulated time (s)" }, ticks: { maxTicksLimit: 8 } },
        y: { beginAtZero: true, ticks: { maxTicksLimit: 6, callback: pctTick } },
      },
    },
  });
}

// ---- gangs and pods -----------------------------------------------------------------

function podRows(p, withGang) {
  return p.items.map((x) => {
    const why = x.message || x.reason || (x.node ? `on ${x.node}` : "");
    return `<tr data-pod="${esc(x.pod)}"><td>${esc(x.pod)}</td>` +
      (withGang ? `<td>${esc(x.gang || "–")}</td>` : `<td><span class="phase phase-${esc(x.state)}">${esc(x.state)}</span></td><td>${esc(x.node || "–")}</td>`) +
      `<td class="num">${x.attempts}</td><td class="num">${x.state === "Pending" ? duration(x.waiting) : "–"}</td>` +
      `<td class="why">${x.reason && x.message ? `<b>${esc(x.reason)}</b>: ` : ""}${esc(why)}</td></tr>`;
  }).join("");
}

function gangDetail(gang, pods) {
  const reason = gang.reason ? `<p class="note">${esc(gang.reason)}</p>` : "";
  if (!pods) return reason + `<p class="note">loading…</p>`;
  if (pods.error) return reason + `<p class="note">${esc(pods.error)}</p>`;
  const p = pods.data;
  const more = p.total > p.items.length || p.offset
    ? `<div class="pager"><button data-page="gang-pods" data-to="${Math.max(0, p.offset - state.gangPodPage)}"${p.offset ? "" : " disabled"} aria-label="previous page">‹</button>` +
      `<span>${p.offset + 1}–${p.offset + p.items.length} of ${p.total}</span><button data-page="gang-pods" data-to="${p.offset + state.gangPodPage}"` +
      `${p.offset + p.items.length < p.total ? "" : " disabled"} aria-label="next page">›</button></div>`
    : "";
  return reason + `<div class="table-wrap"><table class="pods"><thead><tr><th>pod</th><th>state</th><th>node</th>` +
    `<th class="num">attempts</th><th class="num">waiting</th><th>why</th></tr></thead><tbody>` +
    (podRows(p, false) || `<tr><td colspan="6" class="note">no members</td></tr>`) + `</tbody></table></div>${more}`;
}

function renderGangs(g, pods) {
  const podVersion = pods ? (pods.data ? pods.data.version : pods.error) : "";
  if (!changed("gangs", g.version, g.offset, podVersion, state.openGang, state.selected)) return;
  const sel = $("gang-phase");
  const phases = Object.keys(g.phases).sort();
  if ([...sel.options].slice(1).map((o) => o.value).join() !== phases.join()) {
    sel.innerHTML = `<option value="">all</option>` + phases.map((p) => `<option>${esc(p)}</option>`).join("");
    sel.value = state.gangPhase;
  }
  $("gang-count").textContent = Object.entries(g.phases).map(([p, n]) => `${p} ${n}`).join(", ");
  const chip = $("gang-queue");
  chip.hidden = !state.selected;
  chip.innerHTML = state.selected ? `queue ${esc(state.selected)} <button data-unselect aria-label="all queues">×</button>` : "";
  $("gang-table").tBodies[0].innerHTML = g.items.map((x) => {
    const open = x.key === state.openGang;
    return `<tr data-gang="${esc(x.key)}"${open ? ' class="selected"' : ""}><td>${open ? "▾" : "▸"} ${esc(x.key)}</td><td>${esc(x.queue)}</td>` +
      `<td><span class="phase phase-${esc(x.phase)}">${esc(x.phase)}</span></td>` +
      `<td class="num">${x.minMember}</td><td class="num">${x.members}</td><td class="num">${x.bound}</td><td class="num">${x.running}</td>` +
      `<td class="num">${x.waiting}</td><td class="num">${x.succeeded}</td><td class="num">${x.failed}</td>` +
      `<td class="num">${duration(x.age)}</td><td class="why short" title="${esc(x.reason)}">${esc(x.reason)}</td></tr>` +
      (open ? `<tr class="detail"><td colspan="12">${gangDetail(x, pods)}</td></tr>` : "");
  }).join("") || `<tr><td colspan="12" class="note">no pod groups${state.selected ? ` in ${esc(state.selected)}` : ""}</td></tr>`;
  pager("gang-pager", g.offset, g.items.length, g.total, state.gangPage, "gangs");
}

function renderQueuePods(p) {
  const box = $("queue-pods");
  box.hidden = !p;
  if (!p || !changed("queue-pods", p.version, p.offset, state.selected)) return;
  $("queue-pods-name").textContent = state.selected;
  $("queue-pods-count").textContent = `${p.total} pending`;
  $("queue-pod-table").tBodies[0].innerHTML = podRows(p, true) ||
    `<tr><td colspan="5" class="note">nothing pending</td></tr>`;
  pager("queue-pod-pager", p.offset, p.items.length, p.total, state.podPage, "queue-pods");
}

// ---- pending ------------------------------------------------------------------------

function renderPending(p) {
  if (!changed("pending", p.version)) return;
  const groups = p.groups;
  const color = (i) => COLORS[i % COLORS.length];
  chart("pending-chart", {
    type: "doughnut",
    data: {
      labels: groups.map((x) => x.reason),
      datasets: [{ data: groups.map((x) => x.count), backgroundColor: groups.map((_, i) => color(i)) }],
    },
    // The list beside the chart is its legend (a long reason does not fit under it).
    options: { plugins: { title: { display: true, text: `${p.total} pending pod(s)` }, legend: { display: false } } },
  });
  $("pending-groups").innerHTML = groups.map((x, i) =>
    `<div class="group ${esc(x.kind)}" style="border-left-color:${color(i)}" data-reason="${esc(x.reason)}"><div><span class="count">${x.count}</span> ` +
    `${esc(x.reason)}</div><div class="msg">${esc(x.topMessage)}` +
    `${x.distinctMessages > 1 ? ` <em>(+${x.distinctMessages - 1} other message(s))</em>` : ""}</div>` +
    `<details><summary>${x.examples.length} longest waiting</summary><ul>` +
    x.examples.map((e) => `<li data-pod="${esc(e.pod)}"><b>${esc(e.pod)}</b> (queue ${esc(e.queue)}, ` +
      `${e.attempts} attempt(s), waiting ${duration(e.waiting)}): ${esc(e.message)}</li>`).join("") +
    `</ul></details></div>`).join("") || `<p class="note">nothing pending</p>`;
}

// ---- GPU nodes ----------------------------------------------------------------------

const HEAT_PITCH = 16; // px per cell, 14 + a gap of 2
let heatShown = null; // the latest heat map
let heatDrawn = null; // the one on the canvas

function decodeHeat(heat) {
  const lut = new Int8Array(128);
  for (let i = 0; i < heat.encoding.length; i++) lut[heat.encoding.charCodeAt(i)] = i;
  const n = heat.shown;
  const use = new Uint8Array(n), frag = new Uint8Array(n);
  for (let i = 0; i < n; i++) { use[i] = 2 * lut[heat.use.charCodeAt(i)]; frag[i] = 2 * lut[heat.frag.charCodeAt(i)]; }
  return { n, use, frag, total: heat.total, namesVersion: heat.namesVersion, cols: 1 };
}

// The heat map is pixels written into an ImageData (no canvas state to set per cell):
// fill = GPU in use, a ring (its outer 2 or 3 px) = the fragment share of free GPU,
// blended as rgba(217,83,79,0.3 + share/140) over the fill.
function hslRgb(h, s, l) {
  const a = s * Math.min(l, 1 - l);
  const f = (n) => { const k = (n + h / 30) % 12; return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1)))); };
  return [f(0), f(8), f(4)];
}
const HEAT_RGB = Array.from({ length: 101 }, (_, u) => hslRgb(210, 0.7, (95 - 0.55 * u) / 100));
const abgr = ([r, g, b]) => ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
const HEAT_FILL32 = HEAT_RGB.map(abgr);
const RINGS = new Map(); // (use, fragment share) -> the ring's colour
function ringColor(u, f) {
  const key = u * 128 + f;
  let color = RINGS.get(key);
  if (color === undefined) {
    const alpha = Math.min(1, 0.3 + f / 140), fill = HEAT_RGB[u];
    color = abgr([217, 83, 79].map((c, k) => Math.round(alpha * c + (1 - alpha) * fill[k])));
    RINGS.set(key, color);
  }
  return color;
}
const heatImage = { image: null, pixels: null };

// Draw the latest heat map, repainting only the cells that changed since the last
// drawing (all of them: `full`).
function drawHeat(full) {
  const h = heatShown;
  const before = full ? null : heatDrawn;
  heatDrawn = h;
  const canvas = $("heat-canvas");
  if (!h) return;
  const width = Math.max(HEAT_PITCH, $("heat").clientWidth);
  const cols = Math.max(1, Math.floor((width + 2) / HEAT_PITCH));
  const rows = Math.max(1, Math.ceil(h.n / cols));
  const ratio = Math.max(1, Math.round(window.devicePixelRatio || 1));
  const pitch = HEAT_PITCH * ratio, size = 14 * ratio;
  const w = cols * pitch, hh = rows * pitch;
  const ctx = canvas.getContext("2d");
  let cells = null; // null: all of them
  if (canvas.width !== w || canvas.height !== hh || !heatImage.image) {
    canvas.width = w;
    canvas.height = hh;
    canvas.style.width = `${w / ratio}px`;
    canvas.style.height = `${hh / ratio}px`;
    heatImage.image = ctx.createImageData(w, hh);
    heatImage.pixels = new Uint32Array(heatImage.image.data.buffer);
  } else if (before && before.n === h.n && before.cols === cols) {
    cells = [];
    for (let i = 0; i < h.n; i++) if (before.use[i] !== h.use[i] || before.frag[i] !== h.frag[i]) cells.push(i);
    if (!cells.length) { h.cols = cols; return; }
  }
  h.cols = cols;
  const px = heatImage.pixels;
  if (cells === null) px.fill(0);
  let top = Infinity, bottom = -1;
  for (const i of cells || Array.from({ length: h.n }, (_, k) => k)) {
    const x0 = (i % cols) * pitch, y0 = Math.floor(i / cols) * pitch;
    top = Math.min(top, y0);
    bottom = Math.max(bottom, y0 + pitch);
    const fill = HEAT_FILL32[h.use[i]], f = h.frag[i];
    const ring = f > 0 ? ringColor(h.use[i], f) : fill, lw = (f >= 50 ? 3 : 2) * ratio;
    for (let y = 0; y < size; y++) {
      let o = (y0 + y) * w + x0;
      if (y < lw || y >= size - lw) {
        for (let x = 0; x < size; x++) px[o++] = ring;
      } else {
        for (let x = 0; x < size; x++) px[o++] = x < lw || x >= size - lw ? ring : fill;
      }
    }
  }
  if (bottom > top) ctx.putImageData(heatImage.image, 0, 0, 0, top, w, bottom - top);
}

async function heatTitle(event) {
  const h = heatDrawn;
  if (!h) return;
  const canvas = event.currentTarget;
  const rect = canvas.getBoundingClientRect();
  const col = Math.floor((event.clientX - rect.left) / HEAT_PITCH);
  const i = Math.floor((event.clientY - rect.top) / HEAT_PITCH) * h.cols + col;
  if (col >= h.cols || i < 0 || i >= h.n) { canvas.title = ""; return; }
  if (heatNames.version !== h.namesVersion && !heatNames.loading) {
    // Node names only when someone points at a cell (and again when nodes come or go).
    heatNames.loading = true;
    try {
      const names = await (await fetch(query("/dashboard/api/nodes/heat", { format: "packed", limit: 20000 }), { cache: "no-store" })).json();
      heatNames.names = names.names;
      heatNames.version = names.namesVersion;
    } finally {
      heatNames.loading = false;
    }
  }
  const name = heatNames.names && heatNames.version === h.namesVersion ? heatNames.names[i] : `GPU node ${i + 1}`;
  canvas.title = `${name}: ${h.use[i]}% GPU in use, ${h.frag[i]}% of free GPU is fragment`;
}

function renderNodes(n, heat) {
  if (changed("heat", heat.version)) {
    heatShown = decodeHeat(heat);
    $("heat-count").textContent = heat.shown < heat.total ? `(first ${heat.shown} of ${heat.total} by name)` : "";
    if (!heatDrawn) drawHeat(true);
    else whenVisible("heat-canvas", () => drawHeat(false));
  }
  if (!changed("nodes", n.version, n.offset, n.sort)) return;
  const s = n.summary;
  const used = s.gpuMilli.capacity ? s.gpuMilli.used / s.gpuMilli.capacity : 0;
  $("gpu-cards").innerHTML = [
    card("GPUs", s.gpus), card("GPU in use", pct(used)), card("free GPU (milli)", s.gpuMilli.free),
    card("fragment (milli)", s.fragMilli.toFixed(0)), card("fragment of free GPU", pct(s.fragOfFree)),
    card("fully free GPUs", s.freeDevices),
  ].join("");
  const bins = s.histogram.bins;
  const labels = bins.slice(0, -1).map((b, i) => `${(100 * b).toFixed(0)}–${(100 * bins[i + 1]).toFixed(0)}%`);
  chart("gpu-histogram", {
    type: "bar",
    data: {
      labels,
      datasets: [
        { label: "nodes by GPU in use", data: s.histogram.gpuUse, backgroundColor: COLORS[0] },
        { label: "nodes by fragment share of free GPU", data: s.histogram.fragOfFree, backgroundColor: "#d9534f" },
      ],
    },
    options: { plugins: { title: { display: true, text: `${s.gpuNodes} GPU node(s)` } },
      scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
  });
  if (n.total && n.offset >= n.total) state.nodeOffset = Math.max(0, n.total - state.nodePage);
  pager("node-pager", n.offset, n.items.length, n.total, state.nodePage, "nodes");
  $("node-table").tBodies[0].innerHTML = n.items.map((x) =>
    `<tr data-node="${esc(x.name)}"><td>${esc(x.name)}${x.unschedulable ? " (cordoned)" : ""}</td>` +
    `<td>${esc(x.model || "–")}</td><td class="num">${x.gpus}</td>` +
    `<td class="num">${pct(x.gpus ? x.gpuUsedMilli / (1000 * x.gpus) : 0)}</td><td class="num">${x.deviceFreeMilli.join(" ")}</td>` +
    `<td class="num">${x.fragMilli.toFixed(0)}</td>` +
    `<td class="num">${pct(x.cpuMilli.allocatable ? x.cpuMilli.requested / x.cpuMilli.allocatable : 0)}</td>` +
    `<td class="num">${x.pods}</td></tr>`).join("") ||
    `<tr><td colspan="8" class="note">no GPU nodes</td></tr>`;
  $("target-note").textContent = n.targetWorkload.length
    ? "Fragment: free GPU the current GPU workload could not use (FGD measure). Workload shapes: " +
      n.targetWorkload.map((t) => `${t.gpuCount}×${t.gpuMilli}m GPU + ${t.cpuMilli}m cpu (${pct(t.popularity)})`).join("; ")
    : "";
}

// ---- polling ------------------------------------------------------------------------

function yieldToMain() {
  if (window.scheduler && typeof window.scheduler.yield === "function") return window.scheduler.yield();
  return new Promise((resolve) => setTimeout(resolve, 0));
}

async function refresh() {
  const generation = ++state.generation;
  const poll = { at: performance.now(), bytes: 0, requests: 0, unchanged: 0, parseMs: 0, renderMs: 0, longestMs: 0,
    sections: {}, used: new Set() };
  try {
    const get = (path, params) => view(query(path, params), poll);
    const gangPods = state.openGang
      ? get("/dashboard/api/pods", { gang: state.openGang, offset: state.gangPodOffset, limit: state.gangPodPage })
        .catch((err) => ({ error: err.status === 404 ? "this pod group is gone" : err.message }))
      : null;
    const historyQueue = state.selected || hist.key.split("|").slice(1).join("|");
    const parts = await Promise.all([
      get("/dashboard/api/summary"),
      loadTree(poll),
      get("/dashboard/api/queues/top", { n: state.topN, by: state.by, resource: state.resource }),
      get("/dashboard/api/gangs", { phase: state.gangPhase || null, queue: state.selected || null,
        q: state.gangQuery || null, offset: state.gangOffset, limit: state.gangPage }),
      gangPods,
      state.selected ? get("/dashboard/api/pods", { queue: state.selected, offset: state.podOffset, limit: state.podPage }) : null,
      get("/dashboard/api/pending"),
      get("/dashboard/api/nodes", { sort: state.nodeSort, offset: state.nodeOffset, limit: state.nodePage }),
      get("/dashboard/api/nodes/heat", { format: "packed", names: 0, limit: 20000 }),
      historyQueue ? loadHistory(historyQueue, poll) : null,
    ]);
    const [summary, tree, top, gangs, pods, queuePods, pending, nodes, heat] = parts;
    // No queue chosen yet: chart the first of the ranking.
    let charted = historyQueue;
    if (!charted && top.data.items.length) {
      charted = top.data.items[0].name;
      await loadHistory(charted, poll);
    }
    if (generation !== state.generation) return; // a newer refresh is under way
    // Each section renders in its own task when the one before took a while: a poll
    // never holds the main thread for all of them at once.
    const sections = [
      ["summary", () => renderSummary(summary.data)],
      ["tree", () => renderTree(tree)],
      ["top", () => renderTop(top.data)],
      ["history", () => renderHistory(charted, summary.data.clock)],
      ["gangs", () => renderGangs(gangs.data, pods)],
      ["queuePods", () => renderQueuePods(queuePods ? queuePods.data : null)],
      ["pending", () => renderPending(pending.data)],
      ["nodes", () => renderNodes(nodes.data, heat.data)],
    ];
    let since = performance.now();
    for (const [name, render] of sections) {
      const t = performance.now();
      render();
      const now = performance.now();
      const ms = now - t;
      poll.renderMs += ms;
      if (ms >= 0.5) poll.sections[name] = Math.round(10 * ms) / 10;
      if (now - since > 10) {
        poll.longestMs = Math.max(poll.longestMs, now - since);
        await yieldToMain();
        if (generation !== state.generation) return;
        since = performance.now();
      }
    }
    poll.longestMs = Math.max(poll.longestMs, performance.now() - since);
    for (const url of views.keys()) if (!poll.used.has(url)) views.delete(url);
    delete poll.used;
    stats.polls.push(poll);
    if (stats.polls.length > 200) stats.polls.shift();
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  } catch (err) {
    stats.errors += 1;
    $("status").textContent = `cannot refresh: ${err.message}`;
  }
}

function loop() {
  clearTimeout(state.timer);
  refresh().finally(() => { state.timer = setTimeout(loop, state.refreshMs); });
}

function select(name) {
  state.selected = state.selected === name ? "" : name;
  state.gangOffset = 0;
  state.podOffset = 0;
  state.openGang = "";
  refresh();
}

let typing = 0;
function onSearch(apply) {
  return (e) => {
    clearTimeout(typing);
    typing = setTimeout(() => { apply(e.target.value.trim()); refresh(); }, 250);
  };
}

$("resource").addEventListener("change", (e) => { state.resource = e.target.value; refresh(); });
$("rank-by").addEventListener("change", (e) => { state.by = e.target.value; refresh(); });
$("queue-search").addEventListener("input", onSearch((v) => { state.queueQuery = v; state.queueOffsets.delete("?"); }));
$("gang-search").addEventListener("input", onSearch((v) => { state.gangQuery = v; state.gangOffset = 0; }));
$("gang-phase").addEventListener("change", (e) => { state.gangPhase = e.target.value; state.gangOffset = 0; refresh(); });
$("node-sort").addEventListener("change", (e) => { state.nodeSort = e.target.value; state.nodeOffset = 0; refresh(); });
$("heat-canvas").addEventListener("mousemove", heatTitle);
if (watcher) watcher.observe($("heat-canvas"));
let resizing = 0;
window.addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(() => drawHeat(true), 150); });

document.addEventListener("click", (e) => {
  const t = e.target.closest("button, tr[data-queue], tr[data-gang]");
  if (!t) return;
  if (t.dataset.toggle !== undefined) {
    const name = t.dataset.toggle;
    state.toggled.set(name, t.getAttribute("aria-expanded") !== "true");
    refresh();
  } else if (t.dataset.page) {
    const to = Number(t.dataset.to);
    const page = t.dataset.page;
    if (page === "queues") state.queueOffsets.set(t.dataset.key, to);
    else if (page === "gangs") state.gangOffset = to;
    else if (page === "gang-pods") state.gangPodOffset = to;
    else if (page === "queue-pods") state.podOffset = to;
    else if (page === "nodes") state.nodeOffset = to;
    refresh();
  } else if (t.dataset.unselect !== undefined) {
    select(state.selected);
  } else if (t.dataset.queue !== undefined) {
    select(t.dataset.queue);
  } else if (t.dataset.gang !== undefined) {
    state.openGang = state.openGang === t.dataset.gang ? "" : t.dataset.gang;
    state.gangPodOffset = 0;
    refresh();
  }
});
loop();
