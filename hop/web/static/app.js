// hop's web view: jobs, task progress, the latest snapshot as a sortable table and charts, final results.
// Data arrives as server-sent events from /api/events (see hop/web/app.py); nothing here polls or reloads.
"use strict";

const state = {
  jobId: null,
  source: null,
  rows: [],            // rows on show: the latest snapshot's, or the final results
  final: false,        // the rows are the job's final output
  history: new Map(),  // JSON key -> [{progress, estimate, low, high}]
  selectedKey: null,
  sortBy: "estimate",
  sortDescending: true,
  snapshotLabel: null,
};

const keyText = (key) => (typeof key === "string" ? key : JSON.stringify(key));
const number = (value) =>
  value === null || value === undefined ? "" : typeof value === "number" ? value.toLocaleString(undefined, { maximumFractionDigits: 3 }) : JSON.stringify(value);
const shown = (row) => (row.estimate !== null && row.estimate !== undefined ? row.estimate : row.value);

function connect(jobId) {
  if (state.source) state.source.close();
  state.source = new EventSource(jobId ? `/api/events?job=${encodeURIComponent(jobId)}` : "/api/events");
  state.source.addEventListener("open", () => (document.getElementById("connection").textContent = "live"));
  state.source.addEventListener("error", () => (document.getElementById("connection").textContent = "reconnecting…"));
  state.source.addEventListener("jobs", (event) => renderJobs(JSON.parse(event.data)));
  state.source.addEventListener("job", (event) => renderJob(JSON.parse(event.data)));
  state.source.addEventListener("snapshot", (event) => addSnapshot(JSON.parse(event.data)));
  state.source.addEventListener("results", (event) => showResults(JSON.parse(event.data)));
}

function renderJobs(jobs) {
  const list = document.getElementById("jobs");
  list.replaceChildren(
    ...jobs.map((job) => {
      const item = document.createElement("li");
      item.dataset.jobId = job.job_id;
      item.className = job.job_id === state.jobId ? "selected" : "";
      item.textContent = `${job.name} — ${job.state}${job.approximate ? " (approximate)" : ""} — ${Math.round(
        100 * job.map_fraction)}% maps`;
      item.title = job.job_id;
      item.addEventListener("click", () => selectJob(job.job_id));
      return item;
    })
  );
  if (!state.jobId && jobs.length) selectJob(jobs[jobs.length - 1].job_id);
}

function selectJob(jobId) {
  if (jobId === state.jobId) return;
  Object.assign(state, { jobId, rows: [], final: false, history: new Map(), selectedKey: null, snapshotLabel: null });
  document.getElementById("detail").hidden = false;
  renderTable();
  connect(jobId);
}

function renderJob(job) {
  document.getElementById("job-title").textContent = `${job.name} (${job.job_id})`;
  document.getElementById("job-summary").textContent =
    `${job.state}; maps ${job.maps_done}/${job.maps_total}, reduces ${job.reduces_done}/${job.reduces_total}; ` +
    `${Math.round(100 * job.input_fraction)}% of the input processed; ${job.snapshots} snapshots; output ${job.output}`;
  document.getElementById("tasks").replaceChildren(
    ...job.tasks.map((task) => {
      const box = document.createElement("span");
      box.className = `task ${task.state}`;
      box.dataset.kind = task.kind;
      box.title = `${task.kind} ${task.index}: ${task.state}, ${task.attempts} attempt(s) on ${task.worker ?? "-"}`;
      box.innerHTML = `${task.kind} ${task.index} <div class="bar"><div style="width:${Math.round(
        100 * task.fraction)}%"></div></div>`;
      return box;
    })
  );
}

function addSnapshot(snapshot) {
  if (state.final) return;
  state.rows = snapshot.rows;
  state.snapshotLabel = snapshot.label;
  for (const row of snapshot.rows) {
    const key = keyText(row.key);
    if (!state.history.has(key)) state.history.set(key, []);
    state.history.get(key).push({ progress: snapshot.input_fraction, estimate: shown(row), low: row.low, high: row.high });
  }
  const upstream = snapshot.upstream ? ` (recomputed from ${snapshot.upstream.job_id} at ${snapshot.upstream.label})` : "";
  document.getElementById("snapshot-info").textContent =
    `snapshot ${snapshot.label}: ${Math.round(100 * snapshot.input_fraction)}% of the input seen, ` +
    `${snapshot.groups} groups${snapshot.truncated ? " (first rows shown)" : ""}${upstream}`;
  setBadge(false);
  renderTable();
}

function showResults(results) {
  state.final = true;
  state.rows = results.rows.map((row) => ({ ...row, estimate: null, low: null, high: null }));
  for (const row of state.rows) {
    const points = state.history.get(keyText(row.key));
    if (points) points.final = row.value;
  }
  document.getElementById("snapshot-info").textContent =
    `final output: ${results.total} rows${results.truncated ? " (first rows shown)" : ""}` +
    (results.approximate ? "; the job stopped early and its output is its last snapshot" : "");
  setBadge(true, results.approximate);
  renderTable();
}

function setBadge(final, approximate) {
  const badge = document.getElementById("result-state");
  badge.className = `badge ${final ? "final" : "early"}`;
  badge.textContent = final ? (approximate ? "final (approximate)" : "final") : `early: ${state.snapshotLabel}`;
}

function sortedRows() {
  const value = (row) => {
    switch (state.sortBy) {
      case "key": return keyText(row.key);
      case "value": return row.value;
      case "low": return row.low ?? -Infinity;
      case "final": return row.final ? 1 : 0;
      default: return shown(row);
    }
  };
  return [...state.rows].sort((a, b) => {
    const x = value(a), y = value(b);
    const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return state.sortDescending ? -order : order;
  });
}

function renderTable() {
  const rows = sortedRows();
  const body = document.querySelector("#results tbody");
  body.replaceChildren(
    ...rows.slice(0, 500).map((row) => {
      const line = document.createElement("tr");
      const key = keyText(row.key);
      line.className = `${row.final ? "final" : ""} ${key === state.selectedKey ? "selected" : ""}`;
      line.dataset.key = key;
      line.dataset.value = JSON.stringify(row.value);
      const interval = row.low !== null && row.low !== undefined ? `${number(row.low)} – ${number(row.high)}` : "";
      for (const text of [key, number(row.value), number(row.estimate), interval, row.final ? "final" : ""]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        line.appendChild(cell);
      }
      line.addEventListener("click", () => { state.selectedKey = key; renderTable(); });
      return line;
    })
  );
  renderBars(rows.slice(0, 20));
  renderHistory();
}

// Error bars: drawn by a small plugin from each bar's low/high.
const errorBars = {
  id: "errorBars",
  afterDatasetsDraw(chart) {
    const { ctx, scales } = chart;
    const bounds = chart.data.datasets[0]?.bounds ?? [];
    ctx.save();
    ctx.strokeStyle = "#333";
    chart.getDatasetMeta(0).data.forEach((bar, i) => {
      const bound = bounds[i];
      if (!bound || bound.low === null || bound.low === undefined) return;
      const top = scales.y.getPixelForValue(bound.high), bottom = scales.y.getPixelForValue(bound.low);
      ctx.beginPath();
      ctx.moveTo(bar.x, top); ctx.lineTo(bar.x, bottom);
      ctx.moveTo(bar.x - 4, top); ctx.lineTo(bar.x + 4, top);
      ctx.moveTo(bar.x - 4, bottom); ctx.lineTo(bar.x + 4, bottom);
      ctx.stroke();
    });
    ctx.restore();
  },
};

let barChart = null;
function renderBars(rows) {
  const data = {
    labels: rows.map((row) => keyText(row.key)),
    datasets: [{ label: state.final ? "final value" : "estimate (95% interval)", data: rows.map(shown),
      bounds: rows.map((row) => ({ low: row.low, high: row.high })), backgroundColor: state.final ? "#2e7d32" : "#1976d2" }],
  };
  if (!barChart) {
    barChart = new Chart(document.getElementById("bars"), { type: "bar", data, plugins: [errorBars],
      options: { animation: false, maintainAspectRatio: false, scales: { x: { ticks: { autoSkip: false } } } } });
  } else {
    barChart.data = data;
    barChart.update();
  }
}

let historyChart = null;
function renderHistory() {
  const points = state.selectedKey ? state.history.get(state.selectedKey) ?? [] : [];
  const labels = points.map((p) => `${Math.round(100 * p.progress)}%`);
  const datasets = [
    { label: "estimate", data: points.map((p) => p.estimate), borderColor: "#1976d2" },
    { label: "95% low", data: points.map((p) => p.low), borderColor: "#90caf9", borderDash: [4, 4] },
    { label: "95% high", data: points.map((p) => p.high), borderColor: "#90caf9", borderDash: [4, 4], fill: "-1",
      backgroundColor: "rgba(144, 202, 249, 0.2)" },
  ];
  if (points.final !== undefined) {
    datasets.push({ label: "final", data: points.map(() => points.final), borderColor: "#2e7d32" });
  }
  document.getElementById("history-label").textContent = state.selectedKey
    ? `${state.selectedKey}: estimate and interval by input seen`
    : "Click a row to follow a group's estimate over time.";
  if (!historyChart) {
    historyChart = new Chart(document.getElementById("history"), { type: "line", data: { labels, datasets },
      options: { animation: false, maintainAspectRatio: false } });
  } else {
    historyChart.data = { labels, datasets };
    historyChart.update();
  }
}

document.querySelectorAll("#results th").forEach((header) =>
  header.addEventListener("click", () => {
    const by = header.dataset.sort;
    state.sortDescending = state.sortBy === by ? !state.sortDescending : by !== "key";
    state.sortBy = by;
    renderTable();
  })
);

const requested = new URLSearchParams(location.search).get("job");
if (requested) selectJob(requested); else connect(null);
