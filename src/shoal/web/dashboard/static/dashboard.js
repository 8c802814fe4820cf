// Shoal dashboard: polls the read-only JSON API and renders it (charts with Chart.js).
"use strict";

const state = {
  resource: "dominant",
  queue: "",
  gangPhase: "",
  nodeSort: "frag",
  nodeOffset: 0,
  nodePage: 50,
  refreshMs: 2000,
  charts: {},
};

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({
  "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const pct = (x) => (x == null ? "–" : (100 * x).toFixed(1) + "%");
const COLORS = ["#2f7ed8", "#f28f43", "#1aadce", "#8bbc21", "#910000", "#492970",
  "#77a1e5", "#c42525", "#a6c96a", "#0d233a"];

async function getJSON(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function duration(seconds) {
  if (seconds < 120) return `${seconds.toFixed(0)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(0)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function amounts(map, resource) {
  if (!map) return "";
  if (resource && resource !== "dominant") return map[resource] ?? 0;
  return Object.entries(map).map(([r, v]) => `${r.replace("nvidia.com/", "")} ${short(r, v)}`).join(", ");
}

function short(resource, v) {
  // Queues count cpu and nvidia.com/gpu in thousandths (a GPU share is a fraction).
  if (resource === "cpu" || resource === "nvidia.com/gpu") return `${(v / 1000).toFixed(v % 1000 ? 1 : 0)}`;
  if (resource === "memory") return `${(v / 2 ** 30).toFixed(0)}Gi`;
  return `${v}`;
}

function card(key, value) {
  return `<div class="card"><div class="v">${esc(value)}</div><div class="k">${esc(key)}</div></div>`;
}

function chart(id, config) {
  if (!window.Chart) return null;
  let c = state.charts[id];
  if (!c) {
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    c = state.charts[id] = new Chart($(id), config);
  } else {
    c.data = config.data;
    c.update("none");
  }
  return c;
}

// ---- summary ----------------------------------------------------------------------

function renderSummary(s) {
  const clock = s.clock === "virtual" ? `t = ${s.time.toFixed(0)} s (simulated)` : "live cluster";
  $("status").textContent = `${clock} · snapshot ${(1000 * s.buildSeconds).toFixed(1)} ms · ` +
    `updated ${new Date().toLocaleTimeString()}`;
  $("summary").innerHTML = [
    card("nodes", s.nodes), card("GPU nodes", s.gpuNodes), card("pods placed", s.placedPods),
    card("pods pending", s.pendingPods), card("queues", s.queues), card("gangs", s.gangs),
  ].join("");
  if (s.refreshSeconds) state.refreshMs = 1000 * s.refreshSeconds;
}

// ---- queues -------------------------------------------------------------------------

function renderQueues(q, history) {
  const resSel = $("resource");
  const resources = history ? history.resources : ["dominant", ...q.resources];
  if (resSel.options.length !== resources.length) {
    resSel.innerHTML = resources.map((r) => `<option>${esc(r)}</option>`).join("");
    resSel.value = state.resource;
  }
  const qSel = $("queue-select");
  const names = q.queues.map((x) => x.name);
  if ([...qSel.options].map((o) => o.value).join() !== names.join()) {
    qSel.innerHTML = names.map((n) => `<option>${esc(n)}</option>`).join("");
    if (!names.includes(state.queue)) {
      const busy = q.queues.filter((x) => x.leaf).sort((a, b) => b.running + b.pending - a.running - a.pending)[0];
      state.queue = busy ? busy.name : names[0] || "";
    }
    qSel.value = state.queue;
  }
  const r = state.resource;
  const share = (x, series) => {
    if (r === "dominant") return x.share[series];
    const cap = q.capacity[r] || 0;
    const amount = (series === "allocated" ? x.allocated : series === "guaranteed" ? x.guaranteed : x.fairShare)[r] || 0;
    return cap ? amount / cap : 0;
  };
  $("queue-table").tBodies[0].innerHTML = q.queues.map((x) => {
    const a = share(x, "allocated");
    const max = Object.keys(x.maximum).length ? amounts(x.maximum, r === "dominant" ? "" : r) : "–";
    return `<tr data-queue="${esc(x.name)}"><td style="padding-left:${0.5 + 1.2 * x.depth}em">` +
      `${x.leaf ? "" : "▾ "}${esc(x.name)}</td><td class="num">${x.weight}</td>` +
      `<td><span class="bar" style="width:${Math.min(100, 100 * a).toFixed(0) / 2}px"></span>${pct(a)} ` +
      `<span class="note">${esc(amounts(x.allocated, r === "dominant" ? "" : r))}</span></td>` +
      `<td>${pct(share(x, "guaranteed"))}</td><td>${pct(share(x, "fairShare"))}</td>` +
      `<td>${esc(max === "" ? "–" : max)}</td><td class="num">${x.running}</td><td class="num">${x.pending}</td></tr>`;
  }).join("");

  const bars = q.queues.filter((x) => x.leaf);
  chart("queue-now", {
    type: "bar",
    data: {
      labels: bars.map((x) => x.name),
      datasets: [
        { label: "allocated", data: bars.map((x) => share(x, "allocated")), backgroundColor: COLORS[0] },
        { label: "guaranteed", data: bars.map((x) => share(x, "guaranteed")), backgroundColor: "#9aa5b1" },
        { label: "fair share", data: bars.map((x) => share(x, "fairShare")), backgroundColor: COLORS[1] },
      ],
    },
    options: {
      plugins: { title: { display: true, text: `Leaf queues now (${r}, share of cluster)` } },
      scales: { y: { min: 0, ticks: { callback: (v) => pct(v) } } },
    },
  });

  if (!history) return;
  const series = history.queues[state.queue];
  const wall = q.clock === "wall";
  const now = history.times.length ? history.times[history.times.length - 1] : 0;
  const labels = history.times.map((t) => (wall ? -Math.round(now - t) : Math.round(t)));
  const line = (label, data, color, dash) => ({
    label, data: data || [], borderColor: color, backgroundColor: color, borderDash: dash,
    stepped: true, pointRadius: 0, borderWidth: 2, spanGaps: false,
  });
  chart("queue-history", {
    type: "line",
    data: {
      labels,
      datasets: series ? [
        line("allocated", series.allocated, COLORS[0]),
        line("guaranteed", series.guaranteed, "#9aa5b1", [6, 4]),
        line("fair share", series.fairShare, COLORS[1], [2, 2]),
      ] : [],
    },
    options: {
      plugins: { title: { display: true, text: `Queue ${state.queue} over time (${r})` } },
      scales: {
        x: { title: { display: true, text: wall ? "seconds ago" : "simulated time (s)" }, ticks: { maxTicksLimit: 10 } },
        y: { min: 0, ticks: { callback: (v) => pct(v) } },
      },
    },
  });
}

// ---- gangs --------------------------------------------------------------------------

function renderGangs(g) {
  const sel = $("gang-phase");
  const phases = Object.keys(g.phases).sort();
  if ([...sel.options].slice(1).map((o) => o.value).join() !== phases.join()) {
    sel.innerHTML = `<option value="">all</option>` + phases.map((p) => `<option>${esc(p)}</option>`).join("");
    sel.value = state.gangPhase;
  }
  $("gang-count").textContent = `${g.items.length} of ${g.total} shown · ` +
    Object.entries(g.phases).map(([p, n]) => `${p} ${n}`).join(", ");
  $("gang-table").tBodies[0].innerHTML = g.items.map((x) =>
    `<tr data-gang="${esc(x.key)}"><td>${esc(x.key)}</td><td>${esc(x.queue)}</td>` +
    `<td><span class="phase phase-${esc(x.phase)}">${esc(x.phase)}</span></td>` +
    `<td class="num">${x.minMember}</td><td class="num">${x.members}</td><td class="num">${x.running}</td>` +
    `<td class="num">${x.waiting}</td><td class="num">${x.succeeded}</td><td class="num">${x.failed}</td>` +
    `<td>${duration(x.age)}</td><td class="why">${esc(x.reason)}</td></tr>`).join("") ||
    `<tr><td colspan="11" class="note">no pod groups</td></tr>`;
}

// ---- pending ------------------------------------------------------------------------

function renderPending(p) {
  const groups = p.groups;
  chart("pending-chart", {
    type: "doughnut",
    data: {
      labels: groups.map((x) => x.reason),
      datasets: [{ data: groups.map((x) => x.count), backgroundColor: groups.map((_, i) => COLORS[i % COLORS.length]) }],
    },
    options: { plugins: { title: { display: true, text: `${p.total} pending pod(s)` }, legend: { position: "bottom" } } },
  });
  $("pending-groups").innerHTML = groups.map((x) =>
    `<div class="group ${esc(x.kind)}" data-reason="${esc(x.reason)}"><div><span class="count">${x.count}</span> ` +
    `${esc(x.reason)}</div><div class="msg">${esc(x.topMessage)}` +
    `${x.distinctMessages > 1 ? ` <em>(+${x.distinctMessages - 1} other message(s))</em>` : ""}</div>` +
    `<details><summary>${x.examples.length} longest waiting</summary><ul>` +
    x.examples.map((e) => `<li data-pod="${esc(e.pod)}"><b>${esc(e.pod)}</b> (queue ${esc(e.queue)}, ` +
      `${e.attempts} attempt(s), waiting ${duration(e.waiting)}): ${esc(e.message)}</li>`).join("") +
    `</ul></details></div>`).join("") || `<p class="note">nothing pending</p>`;
}

// ---- GPU nodes ----------------------------------------------------------------------

function renderNodes(n, heat) {
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
    options: { plugins: { title: { display: true, text: `${s.gpuNodes} GPU node(s)` } }, scales: { y: { beginAtZero: true } } },
  });
  if (heat) {
    $("heat-count").textContent = heat.shown < heat.total ? `(first ${heat.shown} of ${heat.total} by name)` : "";
    $("heat").innerHTML = heat.names.map((name, i) => {
      const u = heat.usePercent[i], f = heat.fragPercentOfFree[i];
      const light = 95 - 0.55 * u;
      const ring = f > 0 ? `box-shadow: inset 0 0 0 ${f >= 50 ? 3 : 2}px rgba(217,83,79,${0.3 + f / 140})` : "";
      return `<div title="${esc(name)}: ${u}% GPU in use, ${f}% of free GPU is fragment" ` +
        `style="background:hsl(210,70%,${light}%);${ring}"></div>`;
    }).join("");
  }
  if (n.total && n.offset >= n.total) state.nodeOffset = Math.max(0, n.total - state.nodePage);
  $("node-page").textContent = n.total ? ` ${n.offset + 1}–${n.offset + n.items.length} of ${n.total} ` : " none ";
  $("node-table").tBodies[0].innerHTML = n.items.map((x) =>
    `<tr data-node="${esc(x.name)}"><td>${esc(x.name)}${x.unschedulable ? " (cordoned)" : ""}</td>` +
    `<td>${esc(x.model || "–")}</td><td class="num">${x.gpus}</td>` +
    `<td>${pct(x.gpus ? x.gpuUsedMilli / (1000 * x.gpus) : 0)}</td><td>${x.deviceFreeMilli.join(" ")}</td>` +
    `<td class="num">${x.fragMilli.toFixed(0)}</td>` +
    `<td>${pct(x.cpuMilli.allocatable ? x.cpuMilli.requested / x.cpuMilli.allocatable : 0)}</td>` +
    `<td class="num">${x.pods}</td></tr>`).join("") ||
    `<tr><td colspan="8" class="note">no GPU nodes</td></tr>`;
  $("target-note").textContent = n.targetWorkload.length
    ? "Fragment: free GPU the current GPU workload could not use (FGD measure). Workload shapes: " +
      n.targetWorkload.map((t) => `${t.gpuCount}×${t.gpuMilli}m GPU + ${t.cpuMilli}m cpu (${pct(t.popularity)})`).join("; ")
    : "";
}

// ---- polling ------------------------------------------------------------------------

async function refresh() {
  try {
    const nodeQuery = `/dashboard/api/nodes?sort=${state.nodeSort}&offset=${state.nodeOffset}&limit=${state.nodePage}`;
    const gangQuery = `/dashboard/api/gangs?limit=200${state.gangPhase ? `&phase=${encodeURIComponent(state.gangPhase)}` : ""}`;
    const [summary, queues, history, gangs, pending, nodes, heat] = await Promise.all([
      getJSON("/dashboard/api/summary"), getJSON("/dashboard/api/queues"),
      getJSON(`/dashboard/api/queues/history?resource=${encodeURIComponent(state.resource)}`).catch(() => null),
      getJSON(gangQuery), getJSON("/dashboard/api/pending"), getJSON(nodeQuery), getJSON("/dashboard/api/nodes/heat"),
    ]);
    renderSummary(summary);
    queues.clock = summary.clock;
    renderQueues(queues, history);
    renderGangs(gangs);
    renderPending(pending);
    renderNodes(nodes, heat);
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  } catch (err) {
    $("status").textContent = `cannot refresh: ${err.message}`;
  }
}

function loop() {
  refresh().finally(() => setTimeout(loop, state.refreshMs));
}

$("resource").addEventListener("change", (e) => { state.resource = e.target.value; refresh(); });
$("queue-select").addEventListener("change", (e) => { state.queue = e.target.value; refresh(); });
$("gang-phase").addEventListener("change", (e) => { state.gangPhase = e.target.value; refresh(); });
$("node-sort").addEventListener("change", (e) => { state.nodeSort = e.target.value; state.nodeOffset = 0; refresh(); });
$("node-prev").addEventListener("click", () => { state.nodeOffset = Math.max(0, state.nodeOffset - state.nodePage); refresh(); });
$("node-next").addEventListener("click", () => { state.nodeOffset += state.nodePage; refresh(); });
loop();
