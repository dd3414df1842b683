// Shared by the job view (app.js) and the monitor (monitor.js), loaded before them.

// The C2 scoreboard's cells (sources x panes of a window): the letters are those of `_window.json`'s scoreboard grid.
const CELLS = {
  D: { name: "data", color: "#2e7d32" },
  E: { name: "empty", color: "#a5d6a7" },
  M: { name: "missing", color: "#f9a825" },
  L: { name: "lost", color: "#c62828" },
  S: { name: "shed", color: "#8e24aa" },
};

const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`;
