// hop's cluster monitor dashboard: the monitoring query's latest window as a cluster -> rack -> host drill-down,
// each level's metrics over time (mean, a band up to the max, p95; faults marked on the time axis), the jobs, the
// alerts, the faults and the C2 scoreboard. The state is pushed by /api/monitor/events after every window (see
// hop/web/app.py); a level's history comes from /api/monitor/series when it is opened. Nothing polls or reloads.
"use strict";

const KIND = { percent: "percent", number: "number", count: "count", bytes: "bytes", rate: "rate", ms: "ms", seconds: "seconds" };
const METRICS = {
  cpu_percent: { title: "CPU", kind: KIND.percent, group: "host" },
  load1: { title: "Load, 1 min", kind: KIND.number, group: "host" },
  load5: { title: "Load, 5 min", kind: KIND.number, group: "host" },
  mem_used_bytes: { title: "Memory used", kind: KIND.bytes, group: "host" },
  mem_percent: { title: "Memory used, share", kind: KIND.percent, group: "host" },
  swap_percent: { title: "Swap used", kind: KIND.percent, group: "host" },
  disk_read_bytes_s: { title: "Disk read", kind: KIND.rate, group: "host" },
  disk_write_bytes_s: { title: "Disk write", kind: KIND.rate, group: "host" },
  disk_busy_percent: { title: "Disk busy", kind: KIND.percent, group: "host" },
  net_sent_bytes_s: { title: "Network sent", kind: KIND.rate, group: "host" },
  net_recv_bytes_s: { title: "Network received", kind: KIND.rate, group: "host" },
  open_files: { title: "Open files", kind: KIND.count, group: "host" },
  running_maps: { title: "Running maps", kind: KIND.count, group: "engine" },
  running_reduces: { title: "Running reduces", kind: KIND.count, group: "engine" },
  spill_queue: { title: "Spill queue", kind: KIND.count, group: "engine" },
  unsent_spills: { title: "Unsent spills", kind: KIND.count, group: "engine" },
  shuffle_out_bytes_s: { title: "Shuffle out", kind: KIND.rate, group: "engine" },
  blocked_reducers: { title: "Blocked reducers", kind: KIND.count, group: "engine" },
  backpressure_seconds: { title: "Backpressure", kind: KIND.seconds, group: "engine" },
  heartbeat_lag_ms: { title: "Heartbeat lag", kind: KIND.ms, group: "engine" },
};
const CHARTED = ["cpu_percent", "load1", "mem_used_bytes", "shuffle_out_bytes_s", "running_maps", "running_reduces",
  "unsent_spills", "heartbeat_lag_ms"];
const KEEP_POINTS = 300;  // as many windows as the monitor keeps per series
const FAULT_COLORS = { task_failed: "#ef6c00", heartbeat_missed: "#f9a825", worker_lost: "#c62828", worker_rejoined: "#2e7d32", worker_replaced: "#6a1b9a" };

const view = {
  snapshot: null,
  level: "cluster",     // the level on show: cluster, rack or host
  name: "",             // the rack's or host's name
  series: new Map(),    // metric -> [{t, mean, max, p95}] of the level on show
  loading: false,
  loadToken: 0,
  windowsSeen: null,    // of the last state received
  receivedAt: null,     // when it was received, by this browser's clock (s)
  charts: new Map(),    // metric -> Chart
  faultIds: "",         // the fault list drawn (to keep open entries open)
  open: new Set(),      // ids of faults expanded
};

// Formatting ------------------------------------------------------------------------------------------------------
const digits = (value, most) => value.toLocaleString("en-US", { maximumFractionDigits: most });
function scaled(value, units, base) {
  let index = 0;
  while (Math.abs(value) >= base && index < units.length - 1) { value /= base; index += 1; }
  return `${digits(value, Math.abs(value) < 10 && index ? 1 : 0)} ${units[index]}`;
}
function format(kind, value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  switch (kind) {
    case KIND.percent: return `${digits(value, value < 10 ? 1 : 0)}%`;
    case KIND.bytes: return scaled(value, ["B", "KiB", "MiB", "GiB", "TiB"], 1024);
    case KIND.rate: return `${scaled(value, ["B", "KiB", "MiB", "GiB", "TiB"], 1024)}/s`;
    case KIND.ms: return `${digits(value, value < 10 ? 1 : 0)} ms`;
    case KIND.seconds: return `${digits(value, 2)} s`;
    case KIND.count: return digits(value, value < 10 ? 1 : 0);
    default: return digits(value, 2);
  }
}
const metricInfo = (metric) => METRICS[metric] ?? { title: metric.replace(/_/g, " "), kind: KIND.number, group: "other" };
const show = (metric, value) => format(metricInfo(metric).kind, value);
const clock = (seconds) => new Date(seconds * 1000).toISOString().slice(11, 19);
const ago = (seconds) => (seconds < 90 ? `${Math.max(0, Math.round(seconds))} s ago` : `${Math.round(seconds / 60)} min ago`);
// The server's clock now: its time in the last state plus what passed here since. (Its time alone froze every "s ago"
// at the state's: a page whose monitor stopped, or had no new window, said "emitted 0 s ago" for good.)
const serverNow = () => (view.snapshot?.now ?? view.receivedAt ?? Date.now() / 1000) +
  (view.receivedAt === null ? 0 : Date.now() / 1000 - view.receivedAt);
// An "N s ago" that keeps counting: refreshAges() rewrites it every second from its data-since (a server time).
const since = (seconds) => el("span", { className: "age", dataset: { since: String(seconds) } }, ago(serverNow() - seconds));
function refreshAges() {
  for (const item of document.querySelectorAll(".age[data-since]")) {
    item.textContent = ago(serverNow() - Number(item.dataset.since));
  }
}
const duration = (seconds) => (seconds < 60 ? `${Math.round(seconds)} s`
  : seconds < 3600 ? `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`
    : `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`);

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "className") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined && child !== false));
  return node;
}
const badge = (text, kind) => el("span", { className: `badge ${kind ?? ""}` }, text);

// Where things are: racks, hosts, workers -------------------------------------------------------------------------
const latest = () => view.snapshot?.latest ?? null;
const samples = () => Object.values(view.snapshot?.samples ?? {});

function nodeMetrics(level = view.level, name = view.name) {
  const window = latest();
  if (!window) return null;
  if (level === "cluster") return window.cluster;
  if (level === "rack") return window.racks[name]?.metrics ?? null;
  return window.hosts[name]?.metrics ?? null;
}

function rackOf(host) {
  const window = latest();
  return window?.hosts[host]?.rack ?? samples().find((sample) => sample.host === host)?.rack ?? null;
}

function hostsOf(rack) {
  // The hosts of the latest window in this rack, and those of the latest raw samples that did not report in it.
  const window = latest();
  const names = new Set(window?.racks[rack]?.hosts ?? []);
  for (const sample of samples()) if (sample.rack === rack) names.add(sample.host);
  return [...names].sort();
}

function allRacks() {
  const names = new Set(Object.keys(latest()?.racks ?? {}));
  for (const sample of samples()) if (sample.rack) names.add(sample.rack);
  return [...names].sort();
}

function hostOfWorker() {
  // The coordinator's host label of every worker, and that of every sample (several workers may share a host).
  return { ...(view.snapshot?.host_labels ?? {}),
    ...Object.fromEntries(samples().map((sample) => [sample.worker, sample.host])) };
}

function missingHosts() {
  // Host labels, as everywhere on the page (the API names the workers alongside, in missing_workers).
  return latest()?.missing_hosts ?? [];
}

function alertsOf(hosts) {
  const wanted = new Set(hosts);
  return (view.snapshot?.alerts ?? []).filter((alert) => wanted.has(alert.host));
}

function alertBadges(hosts) {
  const alerts = alertsOf(hosts);
  const confirmed = alerts.filter((alert) => alert.state === "alert");
  const tentative = alerts.filter((alert) => alert.state !== "alert");
  const several = hosts.length > 1;
  const described = (list) => list.map((alert) => `${alert.host}: ${alert.metric} ${alert.state}`).join("\n");
  const badges = [];
  if (confirmed.length) badges.push(badge(several ? `${confirmed.length} alert` : "alert", "alert"));
  if (tentative.length) badges.push(badge(several ? `${tentative.length} tentative` : "tentative", "tentative"));
  badges.forEach((item, index) => (item.title = described(index === 0 && confirmed.length ? confirmed : tentative)));
  const missing = new Set(missingHosts());
  const gone = hosts.filter((host) => missing.has(host) || !latest()?.hosts[host]);
  if (latest() && gone.length) {
    const item = badge(several ? `${gone.length} missing` : "missing", "missing");
    item.title = `no sample in the latest window: ${gone.join(", ")}`;
    badges.push(item);
  }
  return badges;
}

function faultsHere() {
  // The faults of the level on show: all for the cluster, those of its hosts' workers for a rack or a host.
  const faults = view.snapshot?.faults ?? [];
  if (view.level === "cluster") return faults;
  const hosts = new Set(view.level === "rack" ? hostsOf(view.name) : [view.name]);
  const hostOf = hostOfWorker();
  return faults.filter((fault) => !fault.worker || hosts.has(hostOf[fault.worker] ?? fault.worker));
}

// Navigation: #/ is the cluster, #/rack/NAME a rack, #/host/NAME a host --------------------------------------------
function fromHash() {
  const match = location.hash.match(/^#\/(rack|host)\/(.+)$/);
  return match ? { level: match[1], name: decodeURIComponent(match[2]) } : { level: "cluster", name: "" };
}

function go(level, name = "") {
  location.hash = level === "cluster" ? "#/" : `#/${level}/${encodeURIComponent(name)}`;
}

function select({ level, name }) {
  view.level = level;
  view.name = name;
  view.series = new Map();
  for (const chart of view.charts.values()) chart.destroy();
  view.charts.clear();
  document.getElementById("charts").replaceChildren();
  render();
  loadSeries();
}

// Series ----------------------------------------------------------------------------------------------------------
async function fetchSeries(level, name, metric) {
  const query = new URLSearchParams({ level, name, metric });
  try {
    const reply = await fetch(`/api/monitor/series?${query}`);
    return reply.ok ? (await reply.json()).points : [];
  } catch {
    return [];
  }
}

async function loadSeries() {
  const token = ++view.loadToken;
  const { level, name } = view;
  view.loading = true;
  const loaded = await Promise.all(CHARTED.map((metric) => fetchSeries(level, name, metric)));
  if (token !== view.loadToken) return;  // another level was opened meanwhile
  view.loading = false;
  CHARTED.forEach((metric, index) => {
    const points = loaded[index];
    const last = points.length ? points[points.length - 1].t : -Infinity;
    const pushed = (view.series.get(metric) ?? []).filter((point) => point.t > last);  // arrived meanwhile
    view.series.set(metric, [...points, ...pushed]);
  });
  renderCharts();
}

function appendLatest() {
  const window = latest();
  const metrics = nodeMetrics();
  if (!window || !metrics) return;
  for (const metric of CHARTED) {
    const stats = metrics[metric];
    if (!stats) continue;
    const points = view.series.get(metric) ?? [];
    if (points.length && points[points.length - 1].t >= window.end) continue;
    points.push({ t: window.end, mean: stats.mean, max: stats.max, p95: stats.p95 });
    if (points.length > KEEP_POINTS) points.splice(0, points.length - KEEP_POINTS);
    view.series.set(metric, points);
  }
}

// Charts ----------------------------------------------------------------------------------------------------------
// Faults as vertical markers on the time axis; on a host's chart in alert, the alert's threshold as a line.
const faultMarkers = {
  id: "faultMarkers",
  afterDatasetsDraw(chart) {
    const { ctx, chartArea, scales } = chart;
    const x = scales.x;
    ctx.save();
    const alert = view.level === "host" ? alertsOf([view.name]).find((a) => a.metric === chart.$metric) : null;
    if (alert && alert.threshold >= scales.y.min && alert.threshold <= scales.y.max) {
      const at = scales.y.getPixelForValue(alert.threshold);
      ctx.strokeStyle = alert.state === "alert" ? "#c62828" : "#f9a825";
      ctx.lineWidth = 1;
      ctx.setLineDash([2, 3]);
      ctx.beginPath();
      ctx.moveTo(chartArea.left, at);
      ctx.lineTo(chartArea.right, at);
      ctx.stroke();
      ctx.fillStyle = ctx.strokeStyle;
      ctx.font = "10px system-ui, sans-serif";
      ctx.fillText("alert threshold", chartArea.left + 4, at - 3);
    }
    let drawn = 0;
    for (const fault of faultsHere()) {
      if (!(fault.ts >= x.min && fault.ts <= x.max)) continue;
      drawn += 1;
      const at = x.getPixelForValue(fault.ts);
      const color = FAULT_COLORS[fault.kind] ?? "#c62828";
      ctx.strokeStyle = color;
      ctx.fillStyle = color;
      ctx.lineWidth = 1.5;
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(at, chartArea.top);
      ctx.lineTo(at, chartArea.bottom);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.beginPath();
      ctx.moveTo(at - 5, chartArea.top);
      ctx.lineTo(at + 5, chartArea.top);
      ctx.lineTo(at, chartArea.top + 7);
      ctx.closePath();
      ctx.fill();
    }
    chart.$faultMarks = drawn;
    ctx.restore();
  },
};

function makeChart(metric) {
  const info = metricInfo(metric);
  const canvas = el("canvas");
  const card = el("div", { className: "chart-card", dataset: { metric, level: view.level, name: view.name, points: "0" } },
    el("div", { className: "chart-head" }, el("h4", {}, info.title), el("span", { className: "now" })),
    el("div", { className: "plot" }, canvas));
  document.getElementById("charts").append(card);
  const chart = new Chart(canvas, {
    type: "line",
    data: {
      datasets: [
        { label: "max", data: [], borderWidth: 0, pointRadius: 0, fill: "+1", backgroundColor: "rgba(25, 118, 210, 0.14)" },
        { label: "mean", data: [], borderColor: "#1565c0", borderWidth: 2, pointRadius: 0, fill: false },
        { label: "p95", data: [], borderColor: "#ef6c00", borderWidth: 1.5, borderDash: [5, 4], pointRadius: 0, fill: false },
      ],
    },
    options: {
      animation: false,
      maintainAspectRatio: false,
      parsing: false,
      normalized: true,
      interaction: { mode: "index", intersect: false },
      scales: {
        // (whole seconds: clock() shows no fraction, and ticks 0.5 s apart read as the same time twice)
        x: { type: "linear",
          ticks: { callback: (value) => clock(value), maxTicksLimit: 5, maxRotation: 0, precision: 0 },
          grid: { color: "#eef1f5" } },
        y: { beginAtZero: true, ticks: { callback: (value) => format(info.kind, value), maxTicksLimit: 5 },
          grid: { color: "#eef1f5" } },
      },
      plugins: {
        legend: { display: false },
        tooltip: { callbacks: {
          title: (items) => (items.length ? `${clock(items[0].parsed.x)} UTC (window end)` : ""),
          label: (item) => `${item.dataset.label}: ${format(info.kind, item.parsed.y)}`,
        } },
      },
    },
    plugins: [faultMarkers],
  });
  chart.$metric = metric;
  view.charts.set(metric, chart);
  return chart;
}

function timeAxis(points) {
  // The axis spans the data (Chart.js would round it out to "nice" bounds, leaving empty space). A single point
  // spans nothing, and Chart.js widened such an axis by 5% of its value: years, at seconds since the epoch, labelled
  // with the times of day of other days. One window's axis spans that window instead (its point is at its end).
  if (!points.length) return { min: undefined, max: undefined };
  const first = points[0].t;
  const last = points[points.length - 1].t;
  if (last > first) return { min: first, max: last };
  const window = latest();
  const span = window && window.end === last && window.end > window.start ? window.end - window.start : 1;
  return { min: last - span, max: last };
}

function renderCharts() {
  const level = view.level === "cluster" ? "Cluster" : `${view.level === "rack" ? "Rack" : "Host"} ${view.name}`;
  document.getElementById("charts-title").textContent = `${level} over time (UTC; each point a window)`;
  for (const metric of CHARTED) {
    const points = view.series.get(metric) ?? [];
    const chart = view.charts.get(metric) ?? makeChart(metric);
    const series = (stat) => points.map((point) => ({ x: point.t, y: point[stat] }));
    chart.data.datasets[0].data = series("max");
    chart.data.datasets[1].data = series("mean");
    chart.data.datasets[2].data = series("p95");
    // A lone point is drawn as a dot: a line needs two.
    for (const dataset of chart.data.datasets.slice(1)) dataset.pointRadius = points.length === 1 ? 3 : 0;
    Object.assign(chart.options.scales.x, timeAxis(points));
    chart.update("none");
    const card = chart.canvas.closest(".chart-card");
    card.dataset.points = String(points.length);
    const last = points[points.length - 1];
    const now = card.querySelector(".now");
    now.textContent = last ? `${show(metric, last.mean)} mean · ${show(metric, last.max)} max` : "no data yet";
    now.title = now.textContent;
  }
}

// The state -------------------------------------------------------------------------------------------------------
function onState(snapshot) {
  const first = view.windowsSeen === null;
  const jump = first ? 0 : snapshot.windows_seen - view.windowsSeen;
  view.snapshot = snapshot;
  view.windowsSeen = snapshot.windows_seen;
  view.receivedAt = Date.now() / 1000;
  // One new window: its point is in the state. The first state (the page may have asked for the series before the
  // monitor had any) or several new windows at once (a reconnect, a burst): fetch the level's series again.
  appendLatest();
  if (first || (jump > 1 && !view.loading)) loadSeries();
  render();
}

function render() {
  renderHeader();
  renderBreadcrumb();
  renderLevel();
  if (view.series.size) renderCharts();
  renderJobs();
  renderAlerts();
  renderStuckTasks();
  renderFaults();
  renderScoreboard();
}

function renderHeader() {
  const window = latest();
  document.getElementById("waiting").hidden = Boolean(window);
  const status = document.getElementById("window-status");
  if (!window) {
    status.replaceChildren();
  } else {
    status.replaceChildren(
      `window ${clock(window.start)}–${clock(window.end)} UTC `,
      badge(window.reason, `reason ${window.reason.replace(/\s+/g, "-")}`),
      ` fidelity ${share(window.fidelity)} · ${plural(view.snapshot.windows_seen, "window")} · emitted `,
      since(window.emitted_at ?? window.end),
    );
  }
  const missing = missingHosts();
  const banner = document.getElementById("missing-hosts");
  banner.hidden = !missing.length;
  banner.replaceChildren(
    el("strong", {}, `Missing ${missing.length === 1 ? "host" : "hosts"}: `),
    ...missing.flatMap((host, index) => [index ? ", " : "", el("a", { href: `#/host/${encodeURIComponent(host)}` }, host)]),
    " sent no sample in the latest window (it was emitted without them; see the scoreboard).",
  );
  renderUnwatched();
  renderWaitingTasks();
}

function renderWaitingTasks() {
  // The query's tasks that have no slot (every slot of the cluster taken): its windows lack their streams meanwhile.
  const waiting = view.snapshot?.waiting_tasks ?? [];
  const banner = document.getElementById("waiting-tasks");
  banner.hidden = !waiting.length;
  const several = waiting.length > 1;
  banner.replaceChildren(
    el("strong", {}, `The monitoring query waits for ${several ? "slots" : "a slot"}: `),
    ...waiting.flatMap((task, index) => [index ? ", " : "",
      el("span", { dataset: { task: task.task } }, `its task for ${task.stream} (${task.task})`)]),
    ` ${several ? "have" : "has"} none, every slot of the cluster being taken; the windows lack what `,
    several ? "they read" : "it reads", " until a slot frees or a worker registers (it runs there).",
  );
}

function renderUnwatched() {
  // Workers that registered after the monitor started: the query has no source for them, so they are in none of its
  // windows, charts or alerts (and never missing). Only a new monitor watches them.
  const unwatched = view.snapshot?.unwatched_workers ?? [];
  const banner = document.getElementById("unwatched-workers");
  banner.hidden = !unwatched.length;
  const several = unwatched.length > 1;
  banner.replaceChildren(
    el("strong", {}, `Unwatched ${several ? "workers" : "worker"}: `),
    ...unwatched.flatMap((worker, index) => [index ? ", " : "", el("span", { className: "code", dataset: { worker } }, worker)]),
    ` registered after the monitor started; the monitoring query watches the workers it started with, so ${several ? "these are" : "this one is"}`
      + " in none of its windows, charts or alerts. Restart ",
    el("span", { className: "code" }, "hop monitor"),
    ` to watch ${several ? "them" : "it"}.`,
  );
}

function renderBreadcrumb() {
  const crumbs = [el("a", { href: "#/", className: view.level === "cluster" ? "current" : "" }, "Cluster")];
  const rack = view.level === "rack" ? view.name : view.level === "host" ? rackOf(view.name) : null;
  if (rack) crumbs.push(el("span", { className: "sep" }, "›"),
    el("a", { href: `#/rack/${encodeURIComponent(rack)}`, className: view.level === "rack" ? "current" : "" }, rack));
  if (view.level === "host") crumbs.push(el("span", { className: "sep" }, "›"),
    el("a", { href: `#/host/${encodeURIComponent(view.name)}`, className: "current" }, view.name));
  document.getElementById("breadcrumb").replaceChildren(...crumbs);
}

const TILES = ["cpu_percent", "load1", "mem_used_bytes", "running_maps", "running_reduces", "shuffle_out_bytes_s"];

function renderLevel() {
  const window = latest();
  const metrics = nodeMetrics();
  const title = document.getElementById("level-title");
  const info = document.getElementById("level-info");
  const hosts = view.level === "cluster" ? Object.keys(window?.hosts ?? {}).concat(missingHosts())
    : view.level === "rack" ? hostsOf(view.name) : [view.name];
  title.textContent = view.level === "cluster" ? "Cluster" : `${view.level === "rack" ? "Rack" : "Host"} ${view.name}`;
  document.getElementById("level-badges").replaceChildren(...alertBadges([...new Set(hosts)]));
  if (view.level === "cluster") {
    info.textContent = window ? `${plural(allRacks().length, "rack")}, ${plural(new Set(hosts).size, "host")}` : "";
  } else if (view.level === "rack") {
    info.textContent = plural(hosts.length, "host");
  } else {
    const sample = samples().find((s) => s.host === view.name);
    const rack = rackOf(view.name);
    const parts = [rack ? `rack ${rack}` : null, sample ? `worker ${sample.worker}` : null].filter(Boolean);
    info.replaceChildren(parts.join(" · "), ...(sample ? [parts.length ? " · latest sample " : "latest sample ",
      since(sample.ts)] : []));
  }
  document.getElementById("summary").replaceChildren(...TILES.map((metric) => {
    const stats = metrics?.[metric];
    return el("div", { className: "tile", dataset: { metric } },
      el("div", { className: "tile-title" }, metricInfo(metric).title),
      el("div", { className: "tile-value" }, stats ? show(metric, stats.mean) : "–"),
      el("div", { className: "tile-sub" }, stats ? `p95 ${show(metric, stats.p95)} · max ${show(metric, stats.max)}` : "no data"));
  }));
  renderHostStrip();
  if (view.level === "cluster") renderChildren("Racks", "rack", allRacks());
  else if (view.level === "rack") renderChildren("Hosts", "host", hostsOf(view.name));
  else renderHostMetrics(metrics);
}

function renderHostStrip() {
  // The cluster view: every host at a glance, coloured by CPU, with its alerts.
  const strip = document.getElementById("hosts-strip");
  if (view.level !== "cluster" || !latest()) { strip.replaceChildren(); return; }
  const hosts = [...new Set([...Object.keys(latest().hosts), ...missingHosts(), ...samples().map((s) => s.host)])].sort();
  strip.replaceChildren(el("span", { className: "strip-label" }, "Hosts"), ...hosts.map((host) => {
    const cpu = latest().hosts[host]?.metrics.cpu_percent?.mean;
    const shade = cpu === undefined ? "#eceff1" : `hsl(${Math.round(130 - 1.3 * Math.min(100, cpu))}, 60%, ${88 - 0.25 * Math.min(100, cpu)}%)`;
    return el("a", { className: "host-chip", href: `#/host/${encodeURIComponent(host)}`, dataset: { host }, style: `background:${shade}`,
      title: `${host}${cpu === undefined ? ": no data in the latest window" : `: CPU ${show("cpu_percent", cpu)} mean`}` },
    host, " ", cpu === undefined ? "" : el("span", { className: "chip-value" }, show("cpu_percent", cpu)), ...alertBadges([host]));
  }));
}

function renderChildren(title, level, names) {
  document.getElementById("children-title").textContent = `${title} in the latest window`;
  const table = document.getElementById("children");
  table.className = "clickable";
  const head = [level, ...(level === "rack" ? ["hosts"] : []), "CPU mean", "CPU max",
    ...TILES.slice(1).map((metric) => metricInfo(metric).title), "status"];
  table.tHead.replaceChildren(el("tr", {}, ...head.map((text) => el("th", {}, text))));
  table.tBodies[0].replaceChildren(...names.map((name) => {
    const metrics = nodeMetrics(level, name);
    const hosts = level === "rack" ? hostsOf(name) : [name];
    const cells = [
      el("td", {}, el("a", { href: `#/${level}/${encodeURIComponent(name)}` }, name)),
      ...(level === "rack" ? [el("td", {}, String(hosts.length))] : []),
      el("td", {}, cpuBar(metrics?.cpu_percent?.mean)),
      el("td", {}, show("cpu_percent", metrics?.cpu_percent?.max)),
      ...TILES.slice(1).map((metric) => el("td", {}, show(metric, metrics?.[metric]?.mean))),
      el("td", { className: "status" }, ...alertBadges(hosts)),
    ];
    return el("tr", { dataset: { level, name }, onclick: () => go(level, name) }, ...cells);
  }));
  if (!names.length) table.tBodies[0].replaceChildren(el("tr", {}, el("td", { colspan: head.length, className: "muted" }, "no data yet")));
}

function cpuBar(value) {
  if (value === undefined || value === null) return "–";
  return el("span", { className: "cpu" },
    el("span", { className: "meter" }, el("span", { style: `width:${Math.min(100, value)}%`, className: value > 75 ? "hot" : "" })),
    show("cpu_percent", value));
}

function renderHostMetrics(metrics) {
  document.getElementById("children-title").textContent = "Metrics in the latest window";
  const table = document.getElementById("children");
  table.className = "";
  const sample = samples().find((s) => s.host === view.name);
  const raw = sample ? { ...sample.host_metrics, ...sample.engine } : {};
  table.tHead.replaceChildren(el("tr", {}, ...["metric", "mean", "p95", "max", "samples", "latest sample"].map((text) => el("th", {}, text))));
  if (!metrics) {
    table.tBodies[0].replaceChildren(el("tr", {}, el("td", { colspan: 6, className: "muted" },
      latest() ? "This host sent no sample in the latest window." : "no data yet")));
    return;
  }
  const names = Object.keys(metrics).sort((a, b) => {
    const order = (metric) => (METRICS[metric] ? Object.keys(METRICS).indexOf(metric) : 1000);
    return order(a) - order(b) || a.localeCompare(b);
  });
  const alerted = new Map(alertsOf([view.name]).map((alert) => [alert.metric, alert]));
  let group = null;
  const rows = [];
  for (const metric of names) {
    const info = metricInfo(metric);
    if (info.group !== group) {
      group = info.group;
      rows.push(el("tr", { className: "group" }, el("td", { colspan: 6 }, { host: "Host", engine: "Engine" }[group] ?? "Other")));
    }
    const stats = metrics[metric];
    const alert = alerted.get(metric);
    rows.push(el("tr", { dataset: { metric }, className: alert ? `alerted ${alert.state}` : "" },
      el("td", {}, info.title, " ", el("span", { className: "muted code" }, metric), alert ? " " : "", alert ? badge(alert.state, alert.state) : ""),
      el("td", {}, show(metric, stats.mean)), el("td", {}, show(metric, stats.p95)), el("td", {}, show(metric, stats.max)),
      el("td", {}, String(stats.n)), el("td", {}, typeof raw[metric] === "number" ? show(metric, raw[metric]) : "–")));
  }
  table.tBodies[0].replaceChildren(...rows);
}

// Jobs ------------------------------------------------------------------------------------------------------------
function progress(done, total, fraction, live) {
  const share = live ? 100 : Math.round(100 * (fraction ?? (total ? done / total : 0)));
  return el("span", { className: "progress" },
    el("span", { className: `meter ${live ? "live" : ""}` }, el("span", { style: `width:${share}%` })),
    live ? `${total} live` : `${done}/${total}`);
}

function renderJobs() {
  const jobs = [...(view.snapshot?.jobs ?? [])].reverse().slice(0, 20);
  document.getElementById("jobs-info").textContent = jobs.length
    ? `(the coordinator's view; ${jobs.filter((job) => job.state === "running").length} running)` : "";
  const body = document.querySelector("#jobs tbody");
  if (!jobs.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 9, className: "muted" }, "No job seen yet.")));
    return;
  }
  body.replaceChildren(...jobs.map((job) => el("tr", { dataset: { jobId: job.job_id, state: job.state } },
    el("td", { title: job.job_id }, el("a", { href: `/?job=${encodeURIComponent(job.job_id)}` }, job.name), " ",
      job.continuous ? badge("continuous", "continuous") : "", el("div", { className: "muted small" }, job.job_id)),
    el("td", {}, badge(job.state, `state ${job.state}`), job.error ? el("div", { className: "small error" }, job.error) : ""),
    el("td", {}, progress(job.maps_done, job.maps_total, job.map_fraction, job.continuous && job.state === "running")),
    el("td", {}, progress(job.reduces_done, job.reduces_total, job.reduce_fraction, job.continuous && job.state === "running")),
    el("td", {}, format(KIND.count, job.records_per_s)),
    el("td", {}, (job.input_records ?? 0).toLocaleString("en-US")),
    el("td", {}, job.continuous ? plural(job.windows ?? 0, "window") : String(job.snapshots ?? 0)),
    // (records/s and failures come with the query's windows: none for a job no window has yet)
    el("td", { className: job.failures ? "bad" : "" }, job.failures === undefined ? "–" : String(job.failures)),
    el("td", {}, duration(job.elapsed ?? 0)))));
}

// Alerts and faults -----------------------------------------------------------------------------------------------
const RULE_METRICS = { cpu_percent: "CPU", load1: "1-minute load", mem_percent: "memory" };
const orList = (names) => (names.length > 1 ? `${names.slice(0, -1).join(", ")} or ${names.at(-1)}` : names.join(""));

function renderAlertRule() {
  const rule = view.snapshot?.alert_rule;
  if (!rule) return;  // (a feed that does not know it: the page's general wording stays)
  document.getElementById("alert-rule").replaceChildren(
    `A host whose ${rule.host_window_s} s average of ${orList(rule.metrics.map((m) => RULE_METRICS[m] ?? m))} ` +
    `is more than ${rule.deviations} standard deviations above the other hosts' ${rule.others_window_s} s average ` +
    "is ", el("em", {}, "tentative"), `; ${rule.windows_in_a_row} windows in a row make an `, el("em", {}, "alert"), ".");
}

function renderAlerts() {
  renderAlertRule();
  const alerts = [...(view.snapshot?.alerts ?? [])].sort((a, b) => (a.state === b.state ? 0 : a.state === "alert" ? -1 : 1));
  const count = document.getElementById("alert-count");
  count.textContent = alerts.length ? String(alerts.length) : "";
  count.className = `count ${alerts.some((alert) => alert.state === "alert") ? "alert" : alerts.length ? "tentative" : ""}`;
  const list = document.getElementById("alerts");
  if (!alerts.length) {
    list.replaceChildren(el("li", { className: "none muted" }, "No alerts: every host is within its peers' range."));
    return;
  }
  list.replaceChildren(...alerts.map((alert) => {
    const kind = metricInfo(alert.metric).kind;
    return el("li", { className: alert.state, dataset: { host: alert.host, metric: alert.metric, state: alert.state },
      onclick: () => go("host", alert.host), title: "Show this host" },
    el("div", { className: "alert-head" }, badge(alert.state, alert.state), el("strong", {}, alert.host), " · ",
      metricInfo(alert.metric).title, el("span", { className: "muted small right" }, `${alert.tentative_count}× in a row`)),
    el("div", { className: "small" },
      `${alert.host_window_s} s average ${format(kind, alert.host_average)} vs the others' ` +
      `${format(kind, alert.others_average)} ± ${format(kind, alert.others_std)} over ${alert.others_window_s} s ` +
      `(threshold ${format(kind, alert.threshold)}); at ${clock(alert.at)} UTC`));
  }));
}

function renderStuckTasks() {
  const rule = view.snapshot?.alert_rule;
  if (rule?.stuck_after_s) {
    document.getElementById("stuck-rule").replaceChildren(
      "A running map or reduce attempt of a batch job that has not advanced (no record read, no group reduced) for " +
      `${rule.stuck_after_s} s, its worker heartbeating, is `, el("em", {}, "stuck"), ".");
  }
  const stuck = view.snapshot?.stuck_tasks ?? [];
  const count = document.getElementById("stuck-count");
  count.textContent = stuck.length ? String(stuck.length) : "";
  count.className = `count ${stuck.length ? "alert" : ""}`;
  const list = document.getElementById("stuck-tasks");
  if (!stuck.length) {
    list.replaceChildren(el("li", { className: "none muted" }, "No stuck tasks."));
    return;
  }
  list.replaceChildren(...stuck.map((task) => el("li", {
    className: "alert", dataset: { job: task.job_id, task: task.task, attempt: String(task.attempt), host: task.host ?? "" },
    onclick: () => task.host && go("host", task.host), title: "Show this task's host" },
  el("div", { className: "alert-head" }, badge("stuck", "alert"), el("strong", {}, `${task.task} #${task.attempt}`),
    ` · ${task.name || task.job_id}`, el("span", { className: "muted small right" }, task.host ?? task.worker ?? "")),
  el("div", { className: "small" },
    `no progress for ${Math.round(task.stalled_s)} s (rule: ${task.stuck_after_s} s) at ${Number(task.records).toLocaleString("en-US")} records, ` +
    `${share(task.fraction ?? 0)} · ${task.job_id} on ${task.worker}`))));
}

function renderFaults() {
  const faults = [...(view.snapshot?.faults ?? [])].reverse();
  document.getElementById("fault-count").textContent = faults.length ? String(faults.length) : "";
  const ids = faults.map((fault) => fault.id).join(",");
  if (ids === view.faultIds) return;  // unchanged: keep what the user expanded
  view.faultIds = ids;
  const box = document.getElementById("faults");
  if (!faults.length) {
    box.replaceChildren(el("p", { className: "muted" }, "No faults so far."));
    return;
  }
  box.replaceChildren(...faults.slice(0, 100).map((fault) => {
    const details = el("details", { className: "fault", dataset: { id: String(fault.id), kind: fault.kind }, open: view.open.has(fault.id) },
      el("summary", {}, el("span", { className: "dot", style: `background:${FAULT_COLORS[fault.kind] ?? "#c62828"}` }),
        `${clock(fault.ts)} `, el("strong", {}, fault.kind.replace(/_/g, " ")),
        fault.worker ? ` · ${fault.worker}` : "", fault.task ? ` · ${typeof fault.task === "string" ? fault.task : JSON.stringify(fault.task)}` : ""),
      el("dl", {}, ...Object.entries(fault).flatMap(([key, value]) => [
        el("dt", {}, key),
        el("dd", {}, key === "ts" ? `${new Date(value * 1000).toISOString()} (${value})`
          : typeof value === "string" ? value : JSON.stringify(value)),
      ])));
    details.addEventListener("toggle", () => (details.open ? view.open.add(fault.id) : view.open.delete(fault.id)));
    return details;
  }));
}

// The C2 scoreboard -----------------------------------------------------------------------------------------------
function renderScoreboard() {
  const window = latest();
  const grid = document.getElementById("scoreboard");
  const legend = document.getElementById("scoreboard-legend");
  if (!window) {
    grid.replaceChildren(el("p", { className: "muted" }, "No window yet."));
    legend.replaceChildren();
    return;
  }
  const board = window.scoreboard;
  const panes = board.panes ?? (board.grid[0] ?? "").length;
  const size = Math.max(8, Math.min(22, Math.floor(220 / Math.max(1, panes))));
  grid.style.gridTemplateColumns = `max-content repeat(${panes}, ${size}px)`;
  grid.style.gridAutoRows = `${size}px`;
  const missing = new Set((window.missing_workers ?? []).map((entry) => entry.worker));  // rows are by worker
  const counts = {};
  const cells = [];
  board.grid.forEach((row, index) => {
    const name = board.names?.[index] ?? `source ${index}`;
    const host = board.hosts?.[index] ?? name;
    cells.push(el("span", { className: `source ${missing.has(name) ? "missing" : ""}`,
      title: host === name ? name : `${name} on host ${host}` }, name));
    [...row].forEach((state, offset) => {
      counts[state] = (counts[state] ?? 0) + 1;
      cells.push(el("span", { className: `cell ${state}`, dataset: { state, source: name },
        style: `background:${CELLS[state]?.color ?? "#9e9e9e"}`,
        title: `${name}, pane ${(board.first_pane ?? 0) + offset}: ${CELLS[state]?.name ?? state}` }));
    });
  });
  grid.replaceChildren(...cells);
  document.getElementById("scoreboard-info").textContent =
    `${board.present ?? "?"}/${board.cells ?? "?"} cells present`;
  document.getElementById("scoreboard-axis").textContent =
    `${plural(board.grid.length, "source")} × ${plural(panes, "pane")}, ${clock(window.start)} → ${clock(window.end)} UTC`;
  legend.replaceChildren(...Object.entries(CELLS).map(([state, { name, color, about }]) =>
    el("li", { dataset: { state }, title: about }, el("span", { className: "swatch", style: `background:${color}` }),
      `${state} ${name}${counts[state] ? ` (${counts[state]})` : ""}`)));
}

// Wiring ----------------------------------------------------------------------------------------------------------
// Once the event stream drops (hop monitor stopped, or its server is not reached), the page says it is not live and
// asks again after growing waits (common.js: retrier).
let eventSource = null;
const retry = retrier(connect, showConnection);

function showConnection() {
  const connection = document.getElementById("connection");
  if (retry.downSince === null) {
    connection.textContent = eventSource?.readyState === EventSource.OPEN ? "live" : "connecting…";
    connection.className = eventSource?.readyState === EventSource.OPEN ? "status live" : "status";
    return;
  }
  connection.textContent = `not live: no answer from the monitor since ${clock(retry.downSince)} UTC; ` +
    retryText(retry);
  connection.className = "status down";
}

function connect() {
  retry.cancel();
  const opened = new EventSource("/api/monitor/events");
  eventSource = opened;
  showConnection();
  opened.addEventListener("open", () => retry.live());
  opened.addEventListener("error", () => {
    opened.close();  // (no reconnection by the browser: the waits are the retrier's)
    if (opened === eventSource) retry.failed();
  });
  opened.addEventListener("waiting", (event) => {
    document.getElementById("waiting").textContent = `${JSON.parse(event.data).message}…`;
  });
  opened.addEventListener("state", (event) => onState(JSON.parse(event.data)));
}

window.addEventListener("hashchange", () => select(fromHash()));
setInterval(refreshAges, 1000);
window.monitorView = view;  // for the tests and the curious
select(fromHash());
connect();
