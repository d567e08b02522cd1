#include "core/cluster/detail/dashboard_page.h"

namespace troupe::cluster {
namespace {

// clang-format off
constexpr std::string_view kPage = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>troupe</title>
<style>
  body { font: 14px system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d2330; }
  header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; gap: 24px;
           align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  header .summary { opacity: 0.85; }
  header .updated { margin-left: auto; opacity: 0.6; font-size: 12px; }
  main { padding: 16px 20px; display: grid; gap: 16px; }
  section { background: #fff; border: 1px solid #dde1e8; border-radius: 6px; padding: 12px 16px; }
  section h2 { font-size: 15px; margin: 0 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #eef0f4;
           font-variant-numeric: tabular-nums; }
  th { font-weight: 600; color: #555; }
  tr.job { cursor: pointer; }
  tr.job.selected { background: #e8f0fe; }
  .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 12px; }
  .chart h3 { font-size: 13px; margin: 0 0 4px; font-weight: 600; }
  .chart svg { width: 100%; height: 200px; background: #fbfcfd; border: 1px solid #eef0f4; }
  .legend span { margin-right: 12px; font-size: 12px; }
  .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
  .events { max-height: 220px; overflow: auto; font-family: ui-monospace, monospace; font-size: 12px; }
  .muted { color: #888; }
  .state-ALIVE, .state-RUNNING { color: #137333; }
  .state-DEAD, .state-FAILED { color: #c5221f; }
  .error { color: #c5221f; }
</style>
</head>
<body>
<header><h1>troupe</h1><span class="summary" id="summary">loading</span>
<span class="updated" id="updated"></span></header>
<main>
<section id="job-section"><h2 id="job-title">Jobs</h2>
  <table id="jobs"><thead><tr><th>Job</th><th>State</th><th>Driver</th><th>Step</th><th>Loss</th>
  <th>Tokens/s</th><th>What</th></tr></thead><tbody></tbody></table>
  <div id="job"></div>
</section>
<section><h2>Nodes</h2><table id="nodes"><thead><tr><th>Node</th><th>Kind</th><th>State</th>
  <th>Name</th><th>Resources (in use / total)</th><th>Actors</th><th>GPUs</th></tr></thead>
  <tbody></tbody></table></section>
<section><h2>Actors and placement groups</h2><div id="actors"></div><table id="groups"><thead>
  <tr><th>Group</th><th>Name</th><th>Strategy</th><th>Bundles</th><th>State</th><th>Nodes</th>
  <th>Job</th></tr></thead><tbody></tbody></table></section>
<section><h2>Recent events</h2><div class="events" id="cluster-events"></div></section>
</main>
<script>
"use strict";
const COLORS = ["#1a73e8", "#e8710a", "#137333", "#c5221f", "#9334e6", "#007b83", "#b06000"];
let selected = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function human(v, unit) {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  const a = Math.abs(v);
  if (unit !== "B" && Number.isInteger(v) && a < 1e4) return String(v) + (unit ? " " + unit : "");
  const k = unit === "B" ? 1024 : 1000;
  const names = unit === "B" ? ["B", "KiB", "MiB", "GiB", "TiB"] : ["", "k", "M", "G", "T"];
  let i = 0, x = v;
  while (Math.abs(x) >= k && i < names.length - 1) { x /= k; i++; }
  const text = a !== 0 && a < 0.01 ? v.toExponential(2) : (i === 0 && unit !== "B" ? x.toPrecision(4) : x.toFixed(x >= 100 ? 0 : 1));
  return text + (unit === "B" ? " " + names[i] : names[i] + (unit ? " " + unit : ""));
}
function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// A line chart of `series` [{name, points: [[x, y]...]}] in an SVG.
function chart(title, series, yunit) {
  const box = el("div", {class: "chart"}, el("h3", {}, title));
  const W = 420, H = 200, L = 56, R = 10, T = 10, B = 24;
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", "data-title": title});
  const all = series.flatMap(x => x.points).filter(p => Number.isFinite(p[1]));
  if (all.length === 0) {
    const t = svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#888"});
    t.textContent = "no values yet";
    s.append(t);
  } else {
    let x0 = Math.min(...all.map(p => p[0])), x1 = Math.max(...all.map(p => p[0]));
    let y0 = Math.min(0, ...all.map(p => p[1])), y1 = Math.max(...all.map(p => p[1]));
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) y1 = y0 + 1;
    const X = x => L + (x - x0) / (x1 - x0) * (W - L - R);
    const Y = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const y = y0 + (y1 - y0) * i / 4;
      s.append(svg("line", {x1: L, x2: W - R, y1: Y(y), y2: Y(y), stroke: "#eef0f4"}));
      const t = svg("text", {x: L - 4, y: Y(y) + 4, "text-anchor": "end", "font-size": 10, fill: "#666"});
      t.textContent = human(y, yunit === "B" ? "B" : "");
      s.append(t);
    }
    for (const [x, anchor] of [[x0, "start"], [x1, "end"]]) {
      const t = svg("text", {x: X(x), y: H - 6, "text-anchor": anchor, "font-size": 10, fill: "#666"});
      t.textContent = "step " + x;
      s.append(t);
    }
    series.forEach((x, i) => {
      const pts = x.points.filter(p => Number.isFinite(p[1]));
      if (pts.length === 0) return;
      const color = COLORS[i % COLORS.length];
      s.append(svg("polyline", {points: pts.map(p => X(p[0]) + "," + Y(p[1])).join(" "),
                                fill: "none", stroke: color, "stroke-width": 1.5,
                                "data-series": x.name, "data-points": pts.length}));
      if (pts.length === 1) s.append(svg("circle", {cx: X(pts[0][0]), cy: Y(pts[0][1]), r: 3, fill: color}));
    });
  }
  const legend = el("div", {class: "legend"});
  series.forEach((x, i) => {
    const swatch = el("i");
    swatch.style.background = COLORS[i % COLORS.length];
    legend.append(el("span", {}, swatch, x.name));
  });
  box.append(s, legend);
  return box;
}

// The step's schedule, a row per rank: each span a bar from its begin to its end.
const KIND_COLORS = {forward: "#1a73e8", backward: "#e8710a", send: "#137333", receive: "#9334e6"};
function timeline(step, spans) {
  const box = el("div", {class: "chart timeline"},
                 el("h3", {}, `Timeline of step ${step} (each rank from its own start)`));
  const tracks = [...new Set(spans.map(s => s.track))].sort();
  const W = 1200, L = 80, R = 10, row = 22, T = 6, B = 22;
  const H = T + B + row * tracks.length;
  const end = Math.max(...spans.map(s => s.end_ms), 1e-3);
  const X = t => L + t / end * (W - L - R);
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, style: `height: ${H}px`, "data-spans": spans.length});
  tracks.forEach((track, i) => {
    const label = svg("text", {x: L - 6, y: T + row * i + 15, "text-anchor": "end", "font-size": 11, fill: "#333"});
    label.textContent = track;
    s.append(label);
  });
  for (const span of spans) {
    const i = tracks.indexOf(span.track);
    const rect = svg("rect", {x: X(span.begin_ms), y: T + row * i + 3, height: row - 6,
                              width: Math.max(0.5, X(span.end_ms) - X(span.begin_ms)),
                              fill: KIND_COLORS[span.kind] || "#888", "data-kind": span.kind});
    const tip = svg("title");
    tip.textContent = `${span.track}: ${span.name}, ${span.begin_ms.toFixed(2)}-${span.end_ms.toFixed(2)} ms`;
    rect.append(tip);
    s.append(rect);
  }
  for (const [t, anchor] of [[0, "start"], [end, "end"]]) {
    const label = svg("text", {x: X(t), y: H - 6, "text-anchor": anchor, "font-size": 10, fill: "#666"});
    label.textContent = t.toFixed(1) + " ms";
    s.append(label);
  }
  const legend = el("div", {class: "legend"});
  for (const [kind, color] of Object.entries(KIND_COLORS)) {
    const swatch = el("i");
    swatch.style.background = color;
    legend.append(el("span", {}, swatch, kind));
  }
  box.append(s, legend);
  return box;
}

function seriesOf(history, key, name) {
  return {name: name || key, points: history.filter(h => key in h.values).map(h => [h.step, h.values[key]])};
}

function labelsOf(text) {
  const out = {};
  for (const m of text.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) out[m[1]] = m[2];
  return out;
}

function renderJob(job) {
  const box = document.getElementById("job");
  const h = job.history;
  const latest = {};
  const perRank = {};
  for (const p of job.latest) {
    if (!p.labels) { latest[p.name] = p.value; continue; }
    const l = labelsOf(p.labels);
    if (!l.rank) continue;
    const row = (perRank[l.rank] = perRank[l.rank] || {});
    row[p.name + ":" + (l.category || l.collective)] = p.value;
  }
  const charts = el("div", {class: "charts"});
  charts.append(chart("Loss", [seriesOf(h, "loss", "training"), seriesOf(h, "validation_loss", "validation")]));
  charts.append(chart("Throughput (tokens/s)", [seriesOf(h, "tokens_per_second", "tokens/s")]));
  charts.append(chart("Step time (s)", [
    seriesOf(h, 'step_seconds{part="total"}', "total"),
    seriesOf(h, 'step_seconds{part="compute"}', "compute"),
    seriesOf(h, 'step_seconds{part="exposed_communication"}', "exposed communication"),
    seriesOf(h, 'step_seconds{part="commit"}', "optimizer commit"),
    seriesOf(h, 'step_seconds{part="waiting"}', "waiting")]));
  charts.append(chart("Gradient norm (before clipping)", [seriesOf(h, "grad_norm", "grad norm")]));
  charts.append(chart("Learning rate", [seriesOf(h, "learning_rate", "learning rate")]));
  const values = el("table", {id: "latest"});
  const shown = [["step", ""], ["loss", ""], ["validation_loss", ""], ["learning_rate", ""],
                 ["grad_norm", ""], ["tokens_per_second", "tokens/s"], ["mfu", ""],
                 ["data_parallel_size", ""], ["pipeline_bubble_ratio", ""], ["loss_scale", ""],
                 ["recoveries_total", ""], ["recovery_seconds_total", "s"], ["steps_lost_total", ""],
                 ["dp_changes_total", ""], ["checkpoints_total", ""], ["checkpoint_seconds", "s"],
                 ["skipped_steps_total", ""]];
  const rows = [];
  for (const [name, unit] of shown) {
    if (!(name in latest)) continue;
    const v = latest[name];
    rows.push(el("tr", {}, el("th", {title: job.help[name] || ""}, name.replaceAll("_", " ")),
                 el("td", {"data-metric": name}, name === "mfu" ? (100 * v).toFixed(1) + "%" : human(v, unit))));
  }
  values.append(...rows);
  const cats = ["parameters", "gradients", "optimizer_state", "buffers", "activations", "peak_rss"];
  const colls = ["allreduce", "reduce_scatter", "allgather", "pipeline", "tensor_parallel"];
  const ranks = el("table", {id: "ranks"});
  ranks.append(el("tr", {}, el("th", {}, "rank"), ...cats.map(c => el("th", {}, c.replace("_", " "))),
                  el("th", {}, "sent in the step")));
  for (const rank of Object.keys(perRank).sort()) {
    const r = perRank[rank];
    const sent = colls.filter(c => r["sent_bytes:" + c]).map(c => c.replace("_", "-") + " " + human(r["sent_bytes:" + c], "B"));
    ranks.append(el("tr", {}, el("td", {}, rank), ...cats.map(c => el("td", {}, human(r["memory_bytes:" + c], "B"))),
                    el("td", {}, sent.join(", ") || "-")));
  }
  const events = el("div", {class: "events", id: "job-events"});
  for (const e of [...job.events].reverse()) events.append(el("div", {}, e));
  if (job.events.length === 0) events.append(el("div", {class: "muted"}, "no events yet"));
  box.replaceChildren(charts,
    ...[...job.timelines].reverse().map(t => timeline(t.step, t.spans)),
    el("div", {class: "charts"},
       el("div", {}, el("h3", {}, "Latest"), values),
       el("div", {}, el("h3", {}, "Events"), events)),
    el("h3", {}, "Memory and traffic per rank"), ranks);
}

async function refresh() {
  let status;
  try {
    const r = await fetch("/api/status", {cache: "no-store"});
    if (!r.ok) throw new Error(await r.text());
    status = await r.json();
  } catch (e) {
    document.getElementById("updated").textContent = "the head does not answer: " + e.message;
    document.getElementById("updated").className = "updated error";
    return;
  }
  const alive = status.nodes.filter(n => n.state === "ALIVE");
  const running = status.jobs.filter(j => j.state === "RUNNING");
  const byState = Object.entries(status.actors.by_state).map(([k, v]) => v + " " + k.toLowerCase()).join(", ");
  document.getElementById("summary").textContent =
    `${alive.length} of ${status.nodes.length} nodes alive, ${status.actors.total} actors` +
    (byState ? ` (${byState})` : "") + `, ${running.length} jobs running`;
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  document.getElementById("updated").className = "updated";

  fill(document.querySelector("#nodes tbody"), status.nodes.map(n => el("tr", {},
    el("td", {}, n.index), el("td", {}, n.kind), el("td", {class: "state-" + n.state}, n.draining ? "DRAINING" : n.state),
    el("td", {}, n.name), el("td", {}, n.usage),
    el("td", {}, n.actors),
    el("td", {}, n.gpus.map(g => `${g.index}: ${g.name} ${human(g.memory_bytes, "B")}`).join("; ")))));
  document.getElementById("actors").textContent =
    status.actors.total + " actors" + (byState ? ": " + byState : "");
  fill(document.querySelector("#groups tbody"), status.placement_groups.map(g => el("tr", {},
    el("td", {}, "pg-" + g.id), el("td", {}, g.name), el("td", {}, g.strategy),
    el("td", {}, g.bundles.join("; ")), el("td", {}, g.placed ? "placed" : "pending"),
    el("td", {}, g.nodes.join(", ")), el("td", {}, g.job || "detached"))));
  const events = document.getElementById("cluster-events");
  events.replaceChildren(...[...status.events].reverse().map(e => el("div", {}, e)));

  const jobs = [...status.jobs].sort((a, b) => b.id - a.id);
  const want = Number((location.hash.match(/job=(\d+)/) || [])[1]);
  if (want && jobs.some(j => j.id === want)) selected = want;
  if (selected === null || !jobs.some(j => j.id === selected)) {
    const pick = jobs.find(j => j.state === "RUNNING" && j.step > 0) || jobs.find(j => j.step > 0) || jobs[0];
    selected = pick ? pick.id : null;
  }
  fill(document.querySelector("#jobs tbody"), jobs.map(j => {
    const row = el("tr", {class: "job" + (j.id === selected ? " selected" : ""), "data-job": j.id},
      el("td", {}, j.id), el("td", {class: "state-" + j.state}, j.state), el("td", {}, j.driver),
      el("td", {}, j.step || "-"), el("td", {}, "loss" in j.latest ? j.latest.loss.toFixed(4) : "-"),
      el("td", {}, "tokens_per_second" in j.latest ? human(j.latest.tokens_per_second) : "-"),
      el("td", {class: "muted"}, j.training || j.end_reason));
    row.addEventListener("click", () => { location.hash = "job=" + j.id; selected = j.id; refresh(); });
    return row;
  }));
  if (selected === null) {
    document.getElementById("job").replaceChildren(el("p", {class: "muted"}, "no job has run on this cluster yet"));
    return;
  }
  document.getElementById("job-title").textContent = "Jobs - job " + selected;
  try {
    const r = await fetch("/api/jobs/" + selected, {cache: "no-store"});
    if (!r.ok) throw new Error(await r.text());
    renderJob(await r.json());
  } catch (e) {
    document.getElementById("job").replaceChildren(el("p", {class: "error"}, "job " + selected + ": " + e.message));
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)page";
// clang-format on

}  // namespace

std::string_view dashboard_page() {
  return kPage;
}

}  // namespace troupe::cluster
