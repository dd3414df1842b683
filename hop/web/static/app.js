// hop's web view: jobs, task progress, the latest snapshot as a sortable table and charts, final results; for a
// continuous job its windows: the latest result, a key's value per window, the C2 scoreboard, recent windows.
// Data arrives as server-sent events from /api/events (see hop/web/app.py); nothing here polls or reloads.
"use strict";

const state = {
  jobId: null,
  jobs: [],            // the cluster's jobs, as last listed
  job: null,           // the job's latest summary (either kind)
  source: null,
  rows: [],            // rows on show: the latest snapshot's, or the final results
  final: false,        // the rows are the job's final output
  history: new Map(),  // JSON key -> [{progress, estimate, low, high}]
  selectedKey: null,
  sortBy: "estimate",
  sortDescending: true,
  snapshotLabel: null,
  confidence: null,    // the job's confidence level (--confidence), from its snapshots
  lastSeq: null,       // the seq of the last snapshot taken in (also the event id the server resumes after)
  approximate: false,  // the final rows are a snapshot the job stopped early at (--stop-when-accurate)
  gone: null,          // why the final output cannot be shown (an earlier step's, deleted when its run ended)
  stopRequested: false,
  down: null,          // why the page is not live (the coordinator is gone or does not answer), or null
  serverGone: false,   // ... because the web view's own server is gone
};

// An int past 2**53 arrives as its decimal string (hop/web/app.py: JSON.parse would round it), and a row lists where
// it holds such ints in big_ints (paths of keys and indexes from the row): they become BigInts here, so that they show
// as numbers in full while a value that is a string stays quoted. A NaN or infinity (JSON has none) arrives as its
// text, "NaN", "Infinity" or "-Infinity", listed in non_finite: it becomes that number again (it showed as no value).
function reviveRow(row) {
  const revive = (paths, as) => {
    for (const path of paths ?? []) {
      let holder = row;
      for (const step of path.slice(0, -1)) holder = holder[step];
      holder[path[path.length - 1]] = as(holder[path[path.length - 1]]);
    }
  };
  revive(row.big_ints, BigInt);
  revive(row.non_finite, Number);
  return row;
}
// JSON text, with a BigInt as its digits (JSON.stringify throws on one), and NaN and infinities as the job's files
// write them (JSON.stringify makes them null).
const jsonText = (value) =>
  typeof value === "bigint" ? value.toString()
    : typeof value === "number" && !Number.isFinite(value) ? String(value)
    : Array.isArray(value) ? `[${value.map(jsonText).join(",")}]`
    : value !== null && typeof value === "object"
      ? `{${Object.entries(value).map(([name, item]) => `${JSON.stringify(name)}:${jsonText(item)}`).join(",")}}`
      : JSON.stringify(value);
const keyText = (key) => (typeof key === "string" ? key : jsonText(key));
// A number below 1 keeps 4 significant digits, not 3 decimals: a Mean of 0.00042 read "0", its interval "0 – 0.001",
// as if it were exactly 0 (and -0.0004 "-0"). Below 1e-6 it is in exponent form (1.5e-9), as JavaScript writes it.
const number = (value) =>
  value === null || value === undefined ? ""
    : typeof value === "number" && !Number.isFinite(value) ? String(value)  // NaN, Infinity: not "∞"
    : typeof value === "number" && value !== 0 && Math.abs(value) < 1e-6 ? String(Number(value.toPrecision(4)))
    : typeof value === "number" && Math.abs(value) < 1 ? value.toLocaleString(undefined, { maximumSignificantDigits: 4 })
    : typeof value === "number" ? value.toLocaleString(undefined, { maximumFractionDigits: 3 })
    : typeof value === "bigint" ? value.toLocaleString()
    : jsonText(value);
// The charts' tooltips write a value as the table does: Chart.js's own format keeps 3 decimals, so a bar or point of
// 0.00012 read "0" there too.
Chart.defaults.plugins.tooltip.callbacks.label = (item) =>
  `${item.dataset.label ? `${item.dataset.label}: ` : ""}${number(item.parsed.y)}`;
const isNumeric = (value) => typeof value === "number" || typeof value === "bigint";
// Table order: numbers (BigInts too) by value, NaN below them all (it compares equal to everything, which would
// leave the order to chance), anything else by its text.
const compare = (x, y) => (isNumeric(x) && isNumeric(y)
  ? (Number.isNaN(x) || Number.isNaN(y) ? Number.isNaN(y) - Number.isNaN(x) : x < y ? -1 : x > y ? 1 : 0)
  : (typeof x === "string" ? x : jsonText(x)).localeCompare(typeof y === "string" ? y : jsonText(y)));
// What a chart plots: a finite number; a BigInt as the nearest double (Chart.js cannot take one); anything else (NaN,
// an infinity) no point.
const plotted = (value) => (typeof value === "number" ? (Number.isFinite(value) ? value : null)
  : typeof value === "bigint" ? Number(value) : null);
// "90% interval": the job's own level (not always 95%); just "interval" until a snapshot said which.
const interval = () => (state.confidence ? `${+(100 * state.confidence).toFixed(2)}% interval` : "interval");
// A key as a table cell and a chart label show it: a long one (a URL, a stack trace) is cut short (style.css: its
// cell ends in "…"), whole in the cell's title. Unbroken, it stretched the page to tens of thousands of pixels, its
// numbers out of sight, and took the bar chart's height as an axis label.
const LABEL_CHARACTERS = 24;
const clipped = (text, most = LABEL_CHARACTERS) => (text.length > most ? `${text.slice(0, most - 1)}…` : text);
function keyCell(cell, key) {
  cell.className = "key";
  cell.title = key;
}
// A chart's caption naming the key it follows (`key` then `text`; `none` while it follows none): the key cut short as
// in its table cell, whole in the caption's title. Whole, a picked key of 5,000 characters filled screens with its text
// under the chart, pushing the table out of sight.
const FOLLOWED_KEY_CHARACTERS = 80;
function followedLabel(element, key, text, none) {
  element.textContent = key === null ? none : `${clipped(key, FOLLOWED_KEY_CHARACTERS)}${text}`;
  element.title = key ?? "";
}
const shown = (row) => (row.estimate !== null && row.estimate !== undefined ? row.estimate : row.value);

// Once the event stream drops or is refused, the page asks for it again after growing waits (common.js: retrier), and
// says why it is not live (state.down) and when it tries again.
const retry = retrier(() => connect(state.jobId), showConnection);

function showConnection() {
  const connection = document.getElementById("connection");
  connection.classList.toggle("down", state.down !== null);
  connection.textContent = state.down === null
    ? (state.source?.readyState === EventSource.OPEN ? "live" : "connecting…")
    : `not live since ${utc(retry.downSince ?? Date.now() / 1000).slice(11, 19)} UTC: ${state.down}; ${retryText(retry)}`;
}

function connect(jobId) {
  if (state.source) state.source.close();
  retry.cancel();
  // Opened again for the job on show, the stream goes on after the last snapshot or window the page has (as the
  // browser's own reconnection did, by Last-Event-ID): without, every snapshot came again, and of a continuous job
  // only the newest windows, any between them and the page's missing from its list.
  const held = jobId === null || jobId !== state.jobId ? null
    : state.job?.continuous ? stream.windows.at(-1)?.seq ?? null : state.lastSeq;
  const after = held === null || held === undefined ? "" : `&after=${held}`;
  const source = new EventSource(jobId ? `/api/events?job=${encodeURIComponent(jobId)}${after}` : "/api/events");
  state.source = source;
  showConnection();
  source.addEventListener("open", () => {
    const wasDown = state.down !== null;
    Object.assign(state, { down: null, serverGone: false });
    retry.live();
    if (wasDown && state.job) renderJob(state.job);
  });
  source.addEventListener("error", (event) => {
    // No reconnection by the browser (it asked every 3 s forever): the waits are the retrier's.
    source.close();
    if (source !== state.source) return;
    // The server's own error event (it has data) ended the stream: the coordinator is gone or no longer knows the
    // job; or the server refused the stream (an error status: the browser closed it): the server says why. A stream
    // that broke, or could not be opened (the browser would try again): no answer from the web view's server.
    if (event.data !== undefined || source.readyState === EventSource.CLOSED) refused(jobId);
    else down(`no answer from the web view's server at ${location.host}`, true);
  });
  source.addEventListener("workers", (event) => renderWorkers(JSON.parse(event.data)));
  source.addEventListener("jobs", (event) => renderJobs(JSON.parse(event.data)));
  source.addEventListener("job", (event) => renderJob(JSON.parse(event.data)));
  source.addEventListener("snapshot", (event) => addSnapshot(JSON.parse(event.data)));
  source.addEventListener("results", (event) => showResults(JSON.parse(event.data)));
  source.addEventListener("window", (event) => addWindow(JSON.parse(event.data)));
}

// The page is not live, for the reason given: the job on show is as last heard of, said so, with no Stop button (a
// stop cannot reach the coordinator); the stream is asked for again after the retrier's wait.
function down(reason, serverGone) {
  Object.assign(state, { down: reason, serverGone });
  retry.failed();
  if (state.job) renderJob(state.job);
}

// The server refused the event stream, or ended it with an error: a job it does not know (?job= mistyped, or from a
// coordinator since restarted) is said so, and the page follows the cluster's jobs instead; anything else (the
// coordinator is gone or does not answer: 503) is shown, and the stream asked for again.
async function refused(jobId) {
  let reply = null;
  let error = "the web view does not answer";
  let serverGone = false;
  try {
    reply = await fetch(jobId ? `/api/jobs/${encodeURIComponent(jobId)}` : "/api/jobs");
    error = reply.ok ? `status ${reply.status}` : (await reply.json()).error;
  } catch (failure) {
    error = `no answer from the web view's server at ${location.host}`;  // (the failure says no more: "Failed to fetch")
    serverGone = true;
  }
  if (jobId !== state.jobId) return;  // another job was picked meanwhile
  if (reply?.status === 404 && jobId) {
    // (Its last state heard is forgotten: after a coordinator's restart the page, live again, showed the job the
    // new coordinator does not know as running, with a Stop button.)
    Object.assign(state, { job: null, down: null, serverGone: false });
    stream.job = null;
    document.getElementById("job-title").textContent = `No job ${jobId}`;
    document.getElementById("job-summary").textContent = error;
    document.getElementById("tasks").replaceChildren();
    document.getElementById("stop-job").hidden = true;
    document.getElementById("stop-state").textContent = "";
    document.getElementById("batch-view").hidden = document.getElementById("stream-view").hidden = true;
    // A page at / shows the newest job, whichever it is: it follows the cluster's jobs and picks the newest once there
    // is one (the job it had picked is gone with a coordinator restarted). An address naming the job keeps to it.
    if (!new URLSearchParams(location.search).get("job")) state.jobId = null;
    connect(null);
    return;
  }
  down(error, serverGone);
}

function renderWorkers(workers) {
  // The cluster's workers, as `hop status` lists them: host, rack, busy slots per pool; a lost one is marked.
  const alive = workers.filter((worker) => worker.alive).length;
  document.getElementById("worker-count").textContent = alive === workers.length ? `${alive}` : `${alive} of ${workers.length} alive`;
  const busy = (worker, pool) => `${worker[`${pool}_slots`] - worker[`free_${pool}`]}/${worker[`${pool}_slots`]} ${pool}`;
  document.getElementById("workers").replaceChildren(
    ...workers.map((worker) => {
      const item = document.createElement("li");
      item.dataset.worker = worker.name;
      item.className = worker.alive ? "alive" : "lost";
      const host = worker.host_label && worker.host_label !== worker.name ? ` on ${worker.host_label}` : "";
      const slots = ["map", "reduce", "stream"].filter((pool) => worker[`${pool}_slots`]).map((pool) => busy(worker, pool));
      item.textContent = `${worker.name}${host} (${worker.rack})${worker.alive ? "" : " — lost"} — ${slots.join(", ")}`;
      item.title = `${worker.host} pid ${worker.pid}`;
      return item;
    })
  );
}

// A job's name, with its step for a step of a multi-step job (its steps share the name).
// A job's place in the run that submitted it: over every step of the run's job files (run_step of run_steps, as
// hop run's messages number them), else among its own job's steps (a job of several steps run alone).
const stepOf = (job) => (job.run_steps > 1 ? [job.run_step, job.run_steps] : [job.step + 1, job.num_steps]);
const jobName = (job) => {
  const [number, of] = stepOf(job);
  return of > 1 ? `${job.name} (step ${number}/${of})` : job.name;
};

// Each job is a link to its page (?job=ID): it can be reached with the keyboard, opened in a new tab, copied; a plain
// click shows the job here and adds it to the tab's history, so Back and Forward go through the jobs looked at. (The
// list was of clickable items: no keyboard, no link, and Back left the page.) The items are updated in place: the list
// changes with every running job's progress, and drawn anew it lost the keyboard's focus twice a second. The newest
// job comes first, each with its id (a hundred runs of one job file read the same but for it), and the list scrolls
// on its own (style.css): oldest first, the job just submitted was at the foot of pages of others, the workers below.
function renderJobs(jobs) {
  state.jobs = jobs;
  const list = document.getElementById("jobs");
  const items = new Map([...list.children].map((item) => [item.dataset.jobId, item]));
  const listed = new Set(jobs.map((job) => job.job_id));
  for (const [jobId, item] of items) if (!listed.has(jobId)) item.remove();  // (retired: --keep-jobs)
  [...jobs].reverse().forEach((job, index) => {
    const item = items.get(job.job_id) ?? jobItem(job);
    if (list.children[index] !== item) list.insertBefore(item, list.children[index] ?? null);
    const link = item.firstChild;
    // Why a job failed (cancelled, say, or a map's error), on a hover: the list said only "failed".
    link.title = [job.error ? `${job.state}: ${job.error}` : "", job.output ? `output ${job.output}` : job.job_id]
      .filter(Boolean).join("\n");
    const text = jobLine(job);
    if (link.dataset.text === text) return;
    link.dataset.text = text;
    const id = document.createElement("span");
    id.className = "job-id";
    id.textContent = job.job_id;
    const marker = document.createElement("span");
    marker.className = "badge continuous";
    marker.textContent = "continuous";
    link.replaceChildren(text, ...(job.continuous ? [marker] : []), id);
  });
  markSelected();
  if (!state.jobId && jobs.length) selectJob(newestJob());
}

// A job as the list names it: its state, and how far its maps are (a share that reads 100% only once they are done) or
// how many windows it wrote.
function jobLine(job) {
  const stopping = job.continuous && job.stopping && job.state === "running" ? " (stopping)" : "";
  return job.continuous ? `${jobName(job)} — ${job.state}${stopping} — ${plural(job.windows, "window")} `
    : `${jobName(job)} — ${job.state}${job.approximate ? " (approximate)" : ""} — ${share(job.map_fraction)} maps`;
}

function jobItem(job) {
  const item = document.createElement("li");
  item.dataset.jobId = job.job_id;
  const link = document.createElement("a");
  link.href = `?job=${encodeURIComponent(job.job_id)}`;
  link.addEventListener("click", (event) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;  // (a tab)
    event.preventDefault();
    if (job.job_id !== state.jobId) history.pushState(null, "", link.href);
    selectJob(job.job_id);
  });
  item.append(link);
  return item;
}

const newestJob = () => state.jobs.at(-1)?.job_id ?? null;

let scrolledTo = null;  // the job the list was last scrolled to

// The job on show marked in the list, and scrolled into the list's view once (a deep link to an old job of many).
function markSelected() {
  for (const item of document.querySelectorAll("#jobs li")) {
    const selected = item.dataset.jobId === state.jobId;
    item.classList.toggle("selected", selected);
    if (selected) item.firstChild.setAttribute("aria-current", "page");
    else item.firstChild.removeAttribute("aria-current");
    if (selected && scrolledTo !== state.jobId) {
      scrolledTo = state.jobId;
      const list = item.parentElement;
      if (item.offsetTop < list.scrollTop || item.offsetTop + item.offsetHeight > list.scrollTop + list.clientHeight) {
        list.scrollTop = item.offsetTop - list.clientHeight / 3;  // (the list alone: scrollIntoView moved the page too)
      }
    }
  }
}

// The job the address names (?job=ID), else the newest (null until the list is in: renderJobs picks it then).
const requestedJob = () => new URLSearchParams(location.search).get("job") ?? newestJob();

function selectJob(jobId) {
  if (jobId === state.jobId) return;
  Object.assign(state, { jobId, job: null, rows: [], final: false, history: new Map(), selectedKey: null,
    snapshotLabel: null, confidence: null, lastSeq: null, approximate: false, gone: null, stopRequested: false });
  Object.assign(stream, { job: null, windows: [], pinned: null, selectedKey: null });
  markSelected();
  document.title = jobId ? `hop: ${jobId}` : "hop: jobs, early results and windows";
  document.getElementById("detail").hidden = jobId === null;
  document.getElementById("skip-to-job").hidden = jobId === null;
  document.getElementById("job-title").textContent = jobId ?? "";
  document.getElementById("job-summary").textContent = "";
  document.getElementById("tasks").replaceChildren();
  document.getElementById("stop-job").hidden = true;
  document.getElementById("stop-state").textContent = "";
  document.getElementById("snapshot-info").textContent = "";
  setBadge();
  renderTable();
  renderStream();
  connect(jobId);
}

// While the page is not live its job's state is the last one heard: "running" may be long over (the jobs of a
// coordinator that stopped fail). It said "running" as if live, with a Stop button that could not work. A job that
// ended is not said to be so: its end is for good (the page of hop run --web, whose server goes with its job, said
// "as last heard" of a job that had succeeded).
const lastKnown = () => (state.down === null || state.job?.state !== "running" ? ""
  : `as last heard, ${state.serverGone ? "the web view's server" : "the coordinator"} being gone or silent: `);

function renderJob(job) {
  state.job = job;
  document.getElementById("job-title").textContent = `${jobName(job)} (${job.job_id})`;
  document.title = `hop: ${jobName(job)} (${job.job_id}), ${job.state}`;
  document.getElementById("batch-view").hidden = Boolean(job.continuous);
  document.getElementById("stream-view").hidden = !job.continuous;
  renderStop(job);
  if (job.continuous) return renderContinuousJob(job);
  setBadge();
  document.getElementById("job-summary").textContent = lastKnown() +
    `${job.state}; maps ${job.maps_done}/${job.maps_total}, reduces ${job.reduces_done}/${job.reduces_total}; ` +
    `${inputDone(job)}; ${plural(job.snapshots, "snapshot")}; output ${job.output}`;
  document.getElementById("tasks").replaceChildren(
    ...job.tasks.map((task) => {
      const box = document.createElement("span");
      box.className = `task ${task.state}`;
      box.dataset.kind = task.kind;
      box.title = `${task.kind} ${task.index}: ${taskState(task)}, ${task.attempts} attempt(s) on ${task.worker ?? "-"}`;
      box.innerHTML = `${task.kind} ${task.index} <div class="bar"><div style="width:${Math.round(
        100 * task.fraction)}%"></div></div>`;
      return box;
    })
  );
}

// How much of its input the job has processed; an input without a record, once the maps are done, is said so, as hop
// run's summary says it: an empty input has no map at all and a fraction of 0, and its succeeded job read "0% of the
// input processed", as if it had missed all of something. A share reads 100% only when whole (common.js: share), as
// hop run's progress line holds 99.9% until the maps are done: rounded, a map on its last records read "100%".
const inputDone = (job) => (job.maps_done === job.maps_total && !job.input_records ? "the input held no records"
  : `${share(job.input_fraction)} of the input processed`);

function taskState(task) {
  // A task waiting for a slot again says how its last attempt ended: "lost" (its worker stopped or went silent,
  // which does not count against --max-attempts) reads differently from "failed".
  const state = task.state === "given_up" ? "given up" : task.state;
  return task.last_attempt && task.state !== task.last_attempt
    ? `${state} (last attempt ${task.last_attempt}${task.error ? `: ${task.error}` : ""})`
    : state;
}

function seenText(fraction) {
  // null: the job reads no input chunks (no --snapshot-every, no --order random), so how much its reducers hold is unknown.
  return fraction == null ? "input seen unknown" : `${share(fraction)} of the input seen`;
}

// A partition that could not take its part of a snapshot (its reduce or the job's key_stratum raised, a
// Sum(nonnegative=True) saw a negative sum) leaves its groups out: the page showed the others' alone ("9 groups",
// "input seen unknown") and said nothing of it. It says how many failed and the first one's error, as hop run does.
function failedPartitions(snapshot) {
  const partitions = snapshot.partitions ?? [];
  const failed = partitions.filter((partition) => partition.error);
  if (!failed.length) return "";
  const [first] = failed;
  return `; ${failed.length} of ${partitions.length} partitions could not take their part, whose groups are ` +
    `missing (partition ${first.index}: ${first.error})`;
}

function addSnapshot(snapshot) {
  if (state.final || (state.lastSeq !== null && snapshot.seq <= state.lastSeq)) return;  // (sent again: no duplicates)
  state.lastSeq = snapshot.seq;
  state.rows = snapshot.rows.map(reviveRow);
  state.snapshotLabel = snapshot.label;
  state.confidence = snapshot.confidence ?? null;
  document.getElementById("interval-heading").textContent = interval();
  for (const row of snapshot.rows) {
    const key = keyText(row.key);
    if (!state.history.has(key)) state.history.set(key, []);
    state.history.get(key).push({ progress: snapshot.input_fraction ?? snapshot.progress, estimate: plotted(shown(row)),
      low: plotted(row.low), high: plotted(row.high) });
  }
  const upstream = snapshot.upstream ? ` (recomputed from ${snapshot.upstream.job_id} at ${snapshot.upstream.label})` : "";
  document.getElementById("snapshot-info").textContent =
    `snapshot ${snapshot.label}: ${seenText(snapshot.input_fraction)}, ` +
    `${snapshot.groups.toLocaleString()} group${snapshot.groups === 1 ? "" : "s"}` +
    `${snapshot.truncated ? ` (the ${snapshot.rows.length.toLocaleString()} largest shown)` : ""}${upstream}` +
    failedPartitions(snapshot) +
    // (--stop-when-accurate: why this snapshot did not end the job, as hop run says it at the end)
    `${snapshot.stop_held_back ? `; not accurate enough to stop: ${snapshot.stop_held_back}` : ""}`;
  setBadge();
  renderTable();
}

function showResults(results) {
  if (results.gone) {  // the job succeeded, but its output was deleted since: its last snapshot stays on show
    state.gone = results.gone;
    document.getElementById("snapshot-info").textContent = results.gone;
    setBadge();
    return;
  }
  state.final = true;
  state.approximate = Boolean(results.approximate);
  // A job stopped early: its output is a snapshot's estimates, sent with their intervals and finality (each row was
  // marked final, its interval dropped). An exact output's rows are its final values.
  state.rows = results.approximate ? results.rows.map(reviveRow)
    : results.rows.map((row) => ({ ...reviveRow(row), estimate: null, low: null, high: null }));
  for (const row of state.rows) {
    const points = state.history.get(keyText(row.key));
    if (points) points.final = plotted(shown(row));  // (the output: an approximate one is the estimate)
  }
  document.getElementById("snapshot-info").textContent =
    `final output: ${results.total.toLocaleString()} row${results.total === 1 ? "" : "s"}` +
    (results.truncated ? ` (the ${results.rows.length.toLocaleString()} largest shown)` : "") +
    (results.approximate ? "; the job stopped early and its output is its last snapshot" : "");
  setBadge();
  renderTable();
}

// What the rows on show are: the final output, the latest snapshot's estimates, or a failed job's last ones.
function setBadge() {
  const badge = document.getElementById("result-state");
  const failed = state.job?.state === "failed";
  const early = state.snapshotLabel === null ? "" : `early: ${state.snapshotLabel}`;
  const last = state.snapshotLabel === null ? "no result" : `last snapshot ${state.snapshotLabel}`;
  const [kind, text] = state.final ? ["final", state.approximate ? "final (approximate)" : "final"]
    : failed ? ["failed", `failed: ${last}`]
    : state.gone ? ["", `output deleted${early ? `; ${early}` : ""}`]
    : ["early", early];
  badge.className = `badge ${kind}`;
  badge.textContent = text;
}

// The column the results are in the order of: an exact output has no estimates, so its rows ranked by estimate are by
// value (shown(row)), and so marked and sorted again, rather than under the estimate's heading over empty cells.
const sortedBy = () => (state.final && !state.approximate && state.sortBy === "estimate" ? "value" : state.sortBy);

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
    const order = compare(value(a), value(b));
    return state.sortDescending ? -order : order;
  });
}

// Keyboard access to the tables -------------------------------------------------------------------------------------
// A table's rows are picked by a click (a key for the chart to follow, a window to show) and its headings sort it:
// the mouse's alone, they were out of the keyboard's reach. A heading is a tab stop that Enter or Space sorts by, its
// order said (aria-sort); a table's rows are one tab stop (the picked row, else the first), the arrow keys, Home and
// End move between them, Enter or Space picks one. Rows are drawn anew with each snapshot or window (and each pick):
// the focus stays on the row of the same key or window, else on the table's stop.
function replaceRows(body, id, rows) {
  const focused = body.contains(document.activeElement) ? document.activeElement.dataset[id] : undefined;
  body.replaceChildren(...rows);
  const stop = rows.find((row) => focused !== undefined && row.dataset[id] === focused)
    ?? rows.find((row) => row.classList.contains("selected")) ?? rows[0];
  for (const row of rows) row.tabIndex = row === stop ? 0 : -1;
  if (focused !== undefined && stop) stop.focus({ preventScroll: true });
}

function keyboardTable(table, sort) {
  const body = table.querySelector("tbody");
  body.addEventListener("keydown", (event) => {
    const row = event.target.closest("tr");
    if (!row || row.parentElement !== body) return;
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      row.click();
      return;
    }
    const moves = { ArrowDown: row.nextElementSibling, ArrowUp: row.previousElementSibling,
      Home: body.firstElementChild, End: body.lastElementChild };
    if (!(event.key in moves)) return;
    event.preventDefault();
    const next = moves[event.key];
    if (!next) return;
    row.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  });
  table.querySelectorAll("th[data-sort]").forEach((header) => {
    header.tabIndex = 0;
    header.addEventListener("click", () => sort(header.dataset.sort));
    header.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" && event.key !== " ") return;
      event.preventDefault();
      sort(header.dataset.sort);
    });
  });
}

function markSort(table, by, descending) {
  document.querySelectorAll(`${table} th[data-sort]`).forEach((header) => {
    const sorted = header.dataset.sort === by;
    header.classList.toggle("sorted", sorted);
    header.classList.toggle("descending", sorted && descending);
    header.setAttribute("aria-sort", sorted ? (descending ? "descending" : "ascending") : "none");
  });
}

const RESULT_TABLE_ROWS = 500;  // rows drawn in the results table (sorted first): a snapshot may send thousands

function renderTable() {
  // What the value column holds now: an exact job's output once it is in is the final value (it read "value so far"
  // over the output); a snapshot's, also the one a job stopped early at, is the value of the input read so far.
  document.getElementById("value-heading").textContent = state.final && !state.approximate ? "final value"
    : "value so far";
  const rows = sortedRows();
  const body = document.querySelector("#results tbody");
  // Said under the table: "the 4,000 largest shown" above it counts the rows received, and only these are drawn.
  document.getElementById("table-note").textContent = rows.length > RESULT_TABLE_ROWS
    ? `The table draws the first ${RESULT_TABLE_ROWS.toLocaleString()} of these ${rows.length.toLocaleString()} ` +
      "rows in this order: sort by another column to bring others up."
    : "";
  replaceRows(body, "key",
    rows.slice(0, RESULT_TABLE_ROWS).map((row) => {
      const line = document.createElement("tr");
      const key = keyText(row.key);
      line.className = `${row.final ? "final" : ""} ${key === state.selectedKey ? "selected" : ""}`;
      line.dataset.key = key;
      line.dataset.value = jsonText(row.value);
      const interval = row.low !== null && row.low !== undefined ? `${number(row.low)} – ${number(row.high)}` : "";
      for (const text of [key, number(row.value), number(row.estimate), interval, row.final ? "final" : ""]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        line.appendChild(cell);
      }
      keyCell(line.firstChild, key);
      line.addEventListener("click", () => { state.selectedKey = key; renderTable(); });
      return line;
    })
  );
  markSort("#results", sortedBy(), state.sortDescending);
  renderBars(rows.slice(0, 20));
  renderHistory();
}

// Error bars: drawn by a small plugin from each bar's low/high. The value axis spans the intervals too: Chart.js
// scales it to the bars alone, so an interval reaching past the largest bar (an early snapshot's wide one) or below 0
// was drawn off the plot, its end cut off at the canvas's edge or across the axis labels.
const errorBars = {
  id: "errorBars",
  afterDataLimits(chart, { scale }) {
    if (scale.axis !== "y") return;
    for (const bound of chart.data.datasets[0]?.bounds ?? []) {
      const low = plotted(bound.low), high = plotted(bound.high);
      if (Number.isFinite(low)) scale.min = Math.min(scale.min, low);
      if (Number.isFinite(high)) scale.max = Math.max(scale.max, high);
    }
  },
  afterDatasetsDraw(chart) {
    const { ctx, scales } = chart;
    const bounds = chart.data.datasets[0]?.bounds ?? [];
    ctx.save();
    ctx.strokeStyle = "#333";
    chart.getDatasetMeta(0).data.forEach((bar, i) => {
      const low = plotted(bounds[i]?.low), high = plotted(bounds[i]?.high);
      if (low === null || high === null) return;
      const top = scales.y.getPixelForValue(high), bottom = scales.y.getPixelForValue(low);
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
    // (A job stopped early: its final output is the estimates, drawn with their intervals, not exact values.)
    datasets: [{ label: state.final && !state.approximate ? "final value"
      : `${state.final ? "final " : ""}estimate (${interval()})`, data: rows.map((row) => plotted(shown(row))),
      bounds: rows.map((row) => ({ low: row.low, high: row.high })), backgroundColor: state.final ? "#2e7d32" : "#1976d2" }],
  };
  if (!barChart) {
    barChart = new Chart(document.getElementById("bars"), { type: "bar", data, plugins: [errorBars],
      options: { animation: false, maintainAspectRatio: false,
        scales: { x: { ticks: { autoSkip: false, callback(value) { return clipped(this.getLabelForValue(value)); } } } },
        plugins: { tooltip: { callbacks: { title: (items) => clipped(items[0]?.label ?? "", 200) } } } } });
  } else {
    barChart.data = data;
    barChart.update();
  }
}

let historyChart = null;
function renderHistory() {
  const points = state.selectedKey ? state.history.get(state.selectedKey) ?? [] : [];
  const labels = points.map((p) => share(p.progress));
  const datasets = [
    { label: "estimate", data: points.map((p) => p.estimate), borderColor: "#1976d2" },
    { label: `${interval()}: low`, data: points.map((p) => p.low), borderColor: "#90caf9", borderDash: [4, 4] },
    { label: `${interval()}: high`, data: points.map((p) => p.high), borderColor: "#90caf9", borderDash: [4, 4], fill: "-1",
      backgroundColor: "rgba(144, 202, 249, 0.2)" },
  ];
  if (points.final !== undefined) {
    datasets.push({ label: "final", data: points.map(() => points.final), borderColor: "#2e7d32" });
  }
  followedLabel(document.getElementById("history-label"), state.selectedKey, ": estimate and interval by input seen",
    "Click a row to follow a group's estimate over time.");
  if (!historyChart) {
    historyChart = new Chart(document.getElementById("history"), { type: "line", data: { labels, datasets },
      options: { animation: false, maintainAspectRatio: false } });
  } else {
    historyChart.data = { labels, datasets };
    historyChart.update();
  }
}

keyboardTable(document.getElementById("results"), (by) => {
  state.sortDescending = sortedBy() === by ? !state.sortDescending : by !== "key";
  state.sortBy = by;
  renderTable();
});

// Stopping a job (POST /api/jobs/ID/stop, as hop stop) --------------------------------------------------------------
// A continuous job drains and writes its last windows. A batch job is cancelled: it fails with no output (the engine
// removes the part files of the reducers that finished, writes no _SUCCESS); its snapshots stay in OUT/_snapshots/
// (deleted with the run's scratch for an earlier step of a multi-step run) and its latest estimates stay on the page.
function whatStays(job) {
  if (!job.snapshots) return "it took no snapshots (--snapshot-every), so nothing of its result is kept";
  const snapshots = `its ${plural(job.snapshots, "snapshot")} so far`;
  const [number, of] = stepOf(job);
  return number < of
    ? `${snapshots} stay on this page only: they are in its output, ${job.output}, which its run deletes (an ` +
      "earlier step's)"
    : `${snapshots} stay in ${job.output}/_snapshots/ (unless it is an earlier job of a pipeline of several job ` +
      "files, whose output the run deletes) and its latest estimates on this page";
}

function renderStop(job) {
  const button = document.getElementById("stop-job");
  button.hidden = job.state !== "running" || Boolean(job.stopping) || state.stopRequested || state.down !== null;
  button.title = job.continuous
    ? "Stop the job: its open panes are drained and its last windows written"
    : "Cancel the job: it fails and writes no output; its snapshots so far stay";
  const note = document.getElementById("stop-state");
  if (job.continuous && job.stopping && job.state === "running") {
    note.textContent = "stopping: the last windows are being written";
  } else if (job.state !== "running" && (job.continuous || job.state === "failed")) {  // (a success: the table says)
    const kept = !job.continuous && job.state === "failed" && job.snapshots ? `; ${whatStays(job)}` : "";
    note.textContent = `the job ${job.state}${job.error ? `: ${job.error}` : ""}${kept}`;
  }
}

async function stopJob() {
  const job = state.job;
  if (!job) return;
  const question = job.continuous
    ? `Stop ${jobName(job)} (${job.job_id})? Its open panes are drained and its last windows written.`
    : `Stop ${jobName(job)} (${job.job_id})? A batch job is cancelled: it fails and writes no output (no part files, ` +
      `no _SUCCESS); ${whatStays(job)}.`;
  if (!confirm(question)) return;
  state.stopRequested = true;
  document.getElementById("stop-job").hidden = true;
  const note = document.getElementById("stop-state");
  note.textContent = "asking the job to stop…";
  try {
    const reply = await fetch(`/api/jobs/${encodeURIComponent(job.job_id)}/stop`, { method: "POST" });
    const body = await reply.json();
    if (state.jobId !== job.job_id) return;  // another job is on show now
    // The job's end may have come before this answer (a loaded machine): the note says the end, as renderStop put it.
    if (reply.ok && state.job?.job_id === job.job_id && state.job.state !== "running") return renderStop(state.job);
    note.textContent = !reply.ok ? `not stopped: ${body.error}`
      : body.cancelled ? "cancelled: the job is failing" : "stopping: the last windows are being written";
  } catch (error) {
    if (state.jobId !== job.job_id) return;
    note.textContent = `not stopped: ${error}`;
    state.stopRequested = false;
  }
}

// Continuous jobs --------------------------------------------------------------------------------------------------
const KEEP_WINDOWS = 120;  // windows kept on the page: the chart's span and the recent-windows list
const TABLE_ROWS = 1000;  // rows of a window drawn in its table (sorted first)

const stream = {
  job: null,           // the job's latest summary
  windows: [],         // oldest first, at most KEEP_WINDOWS
  pinned: null,        // seq of the window on show, or null: the latest
  selectedKey: null,   // the key the chart follows
  sortBy: "value",
  sortDescending: true,
};

const isTime = (window) => (window.window_spec?.unit ?? "seconds") === "seconds";
const utc = (seconds) => new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.000Z$|Z$/, "");
// A Date holds ±8.64e12 s around 1970; a stamp past that (in the wrong unit, say) is shown as its seconds.
const isDate = (seconds) => Math.abs(seconds) <= 8.64e12;
const clock = (seconds) => (isDate(seconds) ? utc(seconds).slice(11) : `${number(seconds)} s`);
// An int past 2**53 arrives as its decimal string (hop/web/app.py: JSON.parse would round it); where the API's
// contract says a number (window bounds and panes), a string is such an int, shown in full.
const whole = (value) => (typeof value === "string" || typeof value === "bigint" ? BigInt(value).toLocaleString()
  : number(value));
// (0.9995 and up read "100%": a window short of complete taken for one)
const percent = (fraction) => share(fraction, fraction === 1 || fraction === 0 ? 0 : 1);
const extent = (amount, unit) => (unit === "seconds" ? `${number(amount)} s` : `${number(amount)} ${unit}`);

function bounds(window) {
  if (!isTime(window)) return `${window.window_spec.unit} ${whole(window.start)} – ${whole(window.end)}`;
  if (!isDate(window.start) || !isDate(window.end)) {
    return `${number(window.start)} – ${number(window.end)} s since 1970`;
  }
  const start = utc(window.start), end = utc(window.end);
  return `${start} – ${end.slice(0, 10) === start.slice(0, 10) ? end.slice(11) : end} UTC`;
}

function shortLabel(window) {
  return isTime(window) ? clock(window.start) : whole(window.start);
}

function shownWindow() {
  if (stream.pinned !== null) {
    const pinned = stream.windows.find((w) => w.seq === stream.pinned);
    if (pinned) return pinned;
    stream.pinned = null;
  }
  return stream.windows[stream.windows.length - 1] ?? null;
}

function renderContinuousJob(job) {
  stream.job = job;
  const stopping = job.stopping && job.state === "running";
  const spec = stream.windows.length ? stream.windows[stream.windows.length - 1].window_spec : null;
  const shape = spec
    ? `; ${spec.range === spec.slide ? "tumbling" : "sliding"} windows of ${extent(spec.range, spec.unit)}` +
      (spec.range === spec.slide ? "" : ` every ${extent(spec.slide, spec.unit)}`) +
      `, panes of ${extent(spec.pane, spec.unit)}`
    : "";
  document.getElementById("job-summary").textContent = lastKnown() +
    `continuous, ${job.state}${stopping ? " (stopping: draining open panes)" : ""}; ` +
    `${plural(job.maps_total, "source")}, ${plural(job.reduces_total, "reducer")}; ` +
    `${(job.input_records ?? 0).toLocaleString()} records read; ${plural(job.windows, "window")} written${shape}; ` +
    `output ${job.output}/windows/`;
  document.getElementById("tasks").replaceChildren(
    ...job.tasks.map((task) => {
      const box = document.createElement("span");
      box.className = `task ${task.state} live`;
      box.dataset.kind = task.kind;
      box.title =
        `stream ${task.kind} ${task.index}: ${taskState(task)}, ${task.attempts} attempt(s) on ${task.worker ?? "-"}`;
      box.innerHTML = `${task.kind} ${task.index} <div class="bar"><div></div></div>`;
      return box;
    })
  );
}

function addWindow(window) {
  const last = stream.windows[stream.windows.length - 1];
  if (last && window.seq <= last.seq) return;  // sent again after a reconnect
  window.rows.forEach(reviveRow);
  stream.windows.push(window);
  if (stream.windows.length > KEEP_WINDOWS) stream.windows.splice(0, stream.windows.length - KEEP_WINDOWS);
  if (stream.selectedKey === null) stream.selectedKey = topKey(window);
  if (stream.job) renderContinuousJob(stream.job);  // the window shape, once known
  renderStream();
}

// The key the trend follows at first: the largest value it can plot (not a NaN or an infinity, which draw nothing),
// else the first row's.
function topKey(window) {
  let best = null;
  for (const row of window.rows) {
    const value = plotted(row.value);
    if (best === null || (value !== null && (best.value === null || value > best.value))) best = { key: row.key, value };
  }
  return best === null ? null : keyText(best.key);
}

function renderStream() {
  const window = shownWindow();
  renderWindow(window);
  renderScoreboard(window);
  renderWindowList(window);
  renderTrend(window);
}

function reasonBadge(element, reason) {
  element.className = `badge reason ${reason.replace(/\s+/g, "-")}`;
  element.textContent = reason;
}

function renderWindow(window) {
  const latest = stream.pinned === null;
  document.getElementById("window-title").textContent = latest ? "Latest window" : `Window ${window?.label ?? ""}`;
  document.getElementById("follow-latest").hidden = latest;
  const badge = document.getElementById("window-reason");
  const info = document.getElementById("window-info");
  const body = document.querySelector("#window-table tbody");
  if (!window) {
    badge.className = "badge";
    badge.textContent = "";
    info.textContent = "No window has closed yet.";
    document.getElementById("window-rows").textContent = "";
    body.replaceChildren();
    return;
  }
  reasonBadge(badge, window.reason);
  const emitted = `${utc(window.emitted_at).slice(11, 19)} UTC`;
  info.textContent =
    `${window.label}: ${bounds(window)}; ${window.records.toLocaleString()} records, ` +
    `${window.output_records.toLocaleString()} rows; fidelity ${percent(window.fidelity)}; ` +
    `emitted ${emitted}`;
  const kept = window.rows_ranked ? "largest" : "first";
  const received = window.truncated
    ? `the coordinator's ${kept} ${window.rows.length.toLocaleString()} of ${window.output_records.toLocaleString()} ` +
      `rows${window.rows_ranked ? " by value" : ""} (all in windows/${window.label}/part-*)`
    : `${window.rows.length.toLocaleString()} rows`;
  document.getElementById("window-rows").textContent =
    received + (window.rows.length > TABLE_ROWS ? `; ${TABLE_ROWS.toLocaleString()} shown in this order` : "");
  const value = (row) => (stream.sortBy === "key" ? keyText(row.key) : row.value);
  const rows = [...window.rows].sort((a, b) => {
    const order = compare(value(a), value(b));
    return stream.sortDescending ? -order : order;
  });
  replaceRows(body, "key",
    rows.slice(0, TABLE_ROWS).map((row) => {
      const line = document.createElement("tr");
      const key = keyText(row.key);
      line.className = key === stream.selectedKey ? "selected" : "";
      line.dataset.key = key;
      line.dataset.value = jsonText(row.value);
      for (const text of [key, number(row.value)]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        line.appendChild(cell);
      }
      keyCell(line.firstChild, key);
      line.addEventListener("click", () => { stream.selectedKey = key; renderStream(); });
      return line;
    })
  );
  markSort("#window-table", stream.sortBy, stream.sortDescending);
}

// A position in a window's unit: a UTC time of day for time windows, else a record ordinal or byte offset.
const position = (window, at) => (isTime(window) ? clock(at) : whole(at));
const zone = (window) => (isTime(window) ? " UTC" : ` (${window.window_spec.unit})`);

// pane: a BigInt (pane numbers may pass 2**53); a time pane's bounds are seconds (a double), others exact.
function paneText(window, pane) {
  const size = window.window_spec.pane;
  const at = (n) => (isTime(window) ? Number(n) * size : n * BigInt(size));
  return `${position(window, at(pane))} – ${position(window, at(pane + 1n))}${zone(window)}`;
}

function renderScoreboard(window) {
  const grid = document.getElementById("scoreboard");
  const legend = document.getElementById("scoreboard-legend");
  if (!window) {
    grid.replaceChildren();
    legend.replaceChildren();
    document.getElementById("scoreboard-info").textContent = "";
    document.getElementById("scoreboard-axis").textContent = "";
    return;
  }
  const board = window.scoreboard;
  const size = Math.max(6, Math.min(22, Math.floor(560 / Math.max(1, board.panes))));
  grid.style.gridTemplateColumns = `max-content repeat(${board.panes}, ${size}px)`;
  grid.style.gridAutoRows = `${size}px`;
  const counts = Object.fromEntries(Object.keys(CELLS).map((state) => [state, 0]));
  const cells = [];
  board.grid.forEach((row, source) => {
    const name = document.createElement("span");
    name.className = "source";
    name.textContent = `source ${source}`;
    cells.push(name);
    [...row].forEach((state, offset) => {
      counts[state] = (counts[state] ?? 0) + 1;
      const cell = document.createElement("span");
      cell.className = `cell ${state}`;
      cell.dataset.state = state;
      cell.style.background = CELLS[state]?.color ?? "#9e9e9e";
      const pane = BigInt(board.first_pane) + BigInt(offset);
      cell.title = `source ${source}, pane ${pane} (${paneText(window, pane)}): ${CELLS[state]?.name ?? state}`;
      cells.push(cell);
    });
  });
  grid.replaceChildren(...cells);
  legend.replaceChildren(
    ...Object.entries(CELLS).map(([state, { name, color, about }]) => {
      const item = document.createElement("li");
      item.dataset.state = state;
      item.title = about;
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = color;
      item.append(swatch, `${state} ${name} (${counts[state]})`);
      return item;
    })
  );
  document.getElementById("scoreboard-info").textContent =
    `${plural(board.sources, "source")} × ${plural(board.panes, "pane")}, ${board.present}/${board.cells} present`;
  document.getElementById("scoreboard-axis").textContent =
    `panes of ${extent(window.window_spec.pane, window.window_spec.unit)}, left to right: ` +
    `${position(window, window.start)} to ${position(window, window.end)}${zone(window)}`;
}

function renderWindowList(shown) {
  const newest = [...stream.windows].reverse();
  document.getElementById("window-count").textContent = stream.job
    ? `(${stream.job.windows} written${stream.job.windows > newest.length ? `, newest ${newest.length} here` : ""})`
    : "";
  replaceRows(document.querySelector("#window-list tbody"), "seq",
    newest.map((window) => {
      const line = document.createElement("tr");
      line.dataset.seq = window.seq;
      line.dataset.label = window.label;
      line.className = window === shown ? "selected" : "";
      line.title = `${bounds(window)}: click to show this window`;
      const label = document.createElement("td");
      label.textContent = window.label;
      const reason = document.createElement("td");
      const badge = document.createElement("span");
      reasonBadge(badge, window.reason);
      reason.appendChild(badge);
      const cells = [label, window.records.toLocaleString(), window.output_records.toLocaleString(), reason,
        percent(window.fidelity)];
      line.append(...cells.map((content) => {
        if (typeof content !== "string") return content;
        const cell = document.createElement("td");
        cell.textContent = content;
        return cell;
      }));
      line.addEventListener("click", () => {
        stream.pinned = window === stream.windows[stream.windows.length - 1] ? null : window.seq;
        renderStream();
      });
      return line;
    })
  );
}

let trendChart = null;
function renderTrend(shown) {
  const key = stream.selectedKey;
  const windows = stream.windows;
  const values = windows.map((window) => {
    const row = key === null ? undefined : window.rows.find((r) => keyText(r.key) === key);
    return row && isNumeric(row.value) ? plotted(row.value) : null;
  });
  const first = windows[0];
  followedLabel(document.getElementById("trend-label"), key,
    `: value per window${first && isTime(first) ? " (window start, UTC)" : ""}`, "Value per window");
  const data = {
    labels: windows.map(shortLabel),
    datasets: [{
      label: key ?? "no key selected",
      data: values,
      borderColor: "#1976d2",
      backgroundColor: "rgba(25, 118, 210, 0.15)",
      fill: true,
      spanGaps: false,
      pointRadius: windows.map((window) => (window === shown ? 5 : 2.5)),
      pointBackgroundColor: windows.map((window) => (window.reason === "complete" ? "#1976d2" : "#f9a825")),
    }],
  };
  if (!trendChart) {
    trendChart = new Chart(document.getElementById("trend"), { type: "line", data, options: {
      animation: false, maintainAspectRatio: false, plugins: { legend: { display: false } },
      scales: { y: { beginAtZero: true }, x: { ticks: { maxRotation: 0, autoSkip: true } } } } });
  } else {
    trendChart.data = data;
    trendChart.update();
  }
}

keyboardTable(document.getElementById("window-table"), (by) => {
  stream.sortDescending = stream.sortBy === by ? !stream.sortDescending : by !== "key";
  stream.sortBy = by;
  renderStream();
});
keyboardTable(document.getElementById("window-list"), () => {});
document.getElementById("follow-latest").addEventListener("click", () => { stream.pinned = null; renderStream(); });
document.getElementById("stop-job").addEventListener("click", stopJob);
// The skip link moves the keyboard to the job's heading; followed as a link it would put #detail in the address,
// which names the job on show (?job=ID) and its history.
document.getElementById("skip-to-job").addEventListener("click", (event) => {
  event.preventDefault();
  document.getElementById("job-title").focus();
});

window.addEventListener("popstate", () => selectJob(requestedJob()));
const requested = requestedJob();
if (requested) selectJob(requested); else connect(null);
