// Shared by the job view (app.js) and the monitor (monitor.js), loaded before them.

// The C2 scoreboard's cells (sources x panes of a window): the letters are those of `_window.json`'s scoreboard grid
// (hop/stream/assembler.py). Only D and E count as present; `about` is the legend's tooltip.
const CELLS = {
  D: { name: "data", color: "#2e7d32", about: "present: the source's records of this pane" },
  E: { name: "empty", color: "#a5d6a7", about: "present: the source sealed this pane with no record" },
  M: { name: "missing", color: "#f9a825", about: "not present: not yet sent when the window was emitted" },
  L: { name: "lost", color: "#c62828", about: "not present: lost in a failure" },
  S: { name: "shed", color: "#8e24aa", about: "not present in whole: records shed to meet the latency bound" },
  C: { name: "cut by the stop", color: "#78909c",
    about: "not present: the job was stopped before the source finished this pane (flushed, or never reached)" },
};

const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`;

// A measured share (a window's fidelity: the share of its cells present) as a percentage that reads 100% only when
// whole and 0% only when none, as `hop run` prints it (hop/wording.py, share): `decimals` decimals, more where those
// would round it to either end, up to 4, past which it is held one last decimal inside. 999 of 1,000 cells read
// "100%", taken for a complete window.
function share(fraction, decimals = 0) {
  const value = 100 * fraction;
  const inside = fraction > 0 && fraction < 1;
  let places = decimals;
  const rounded = () => Number(value.toFixed(places));
  while (inside && places < 4 && !(rounded() > 0 && rounded() < 100)) places += 1;
  const step = 10 ** -places;
  return `${(inside ? Math.min(Math.max(value, step), 100 - step) : value).toFixed(places)}%`;
}

// Reconnecting to a server that went away ------------------------------------------------------------------------
// Once a page's event stream drops (its server stopped: hop web, hop monitor, or hop run --web whose job ended; or
// the coordinator behind it is gone), the page asks again after RETRY_FIRST_SECONDS, then after twice as long each
// time, up to RETRY_MOST_SECONDS. The browser's own reconnection asked every 3 s forever, each time a refused
// connection logged in the console, for a server that may be gone for good. The waits grow so that a blip (a
// dropped connection, a server restarted at once) is over in a second or two, while one stopped for good costs two
// requests a minute; the page still follows a server started again at its address, within RETRY_MOST_SECONDS, and at
// once when the user looks at the page again (its window gets the focus, its tab is shown): a user who restarted the
// server and comes back to the page wants it live.
const RETRY_FIRST_SECONDS = 1;
const RETRY_MOST_SECONDS = 30;

// The retries of one page's stream. attempt() opens the stream again; the page calls live() once it is open and
// failed() each time an attempt fails or the open stream drops (having closed it: the waits are this one's, not the
// browser's), then attempt() runs after the wait. onChange() redraws what the page says of its connection: it is called
// on every change and once a second while down, for the countdown (wait()).
function retrier(attempt, onChange) {
  const retry = {
    failures: 0,      // attempts in a row that failed (0 while live)
    downSince: null,  // when the stream dropped (this browser's clock, s), or null while live
    retryAt: null,    // when the next attempt is due (this browser's clock, s), or null
    timer: null,
    // Whole seconds until the next attempt (0: it is under way), or null when none is due.
    wait() {
      return retry.retryAt === null ? null : Math.max(0, Math.ceil(retry.retryAt - Date.now() / 1000));
    },
    live() {
      retry.cancel();
      Object.assign(retry, { failures: 0, downSince: null });
      onChange();
    },
    failed() {
      retry.cancel();
      const wait = Math.min(RETRY_MOST_SECONDS, RETRY_FIRST_SECONDS * 2 ** retry.failures);
      retry.failures += 1;
      retry.downSince ??= Date.now() / 1000;
      retry.retryAt = Date.now() / 1000 + wait;
      retry.timer = setTimeout(run, wait * 1000);
      onChange();
    },
    // The attempt due, made now (the user looks at the page); nothing while live or while an attempt is under way.
    now() {
      if (retry.timer !== null) run();
    },
    // No attempt due (the page opens another stream itself).
    cancel() {
      clearTimeout(retry.timer);
      retry.timer = retry.retryAt = null;
    },
  };
  const run = () => {
    retry.cancel();
    attempt();
  };
  window.addEventListener("focus", retry.now);
  document.addEventListener("visibilitychange", () => { if (document.visibilityState === "visible") retry.now(); });
  setInterval(() => { if (retry.downSince !== null) onChange(); }, 1000);
  return retry;
}

// "trying again in 4 s" / "trying again…" (an attempt under way), as a page says its next attempt.
const retryText = (retry) => {
  const wait = retry.wait();
  return wait === null || wait === 0 ? "trying again…" : `trying again in ${wait} s`;
};
