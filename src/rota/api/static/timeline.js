// A job's life drawn to scale: one row per run (from its start to its end; a running one's
// lease ahead of it; a mark at its last heartbeat, and where an expired lease ran out), the gap
// before a run that took the job over, and a durable job's steps, sleeps and waits as rows
// below. SVG from the job's detail; every label goes in as text.

import { s } from "./dom.js";
import { absolute, duration, parseTime, plural, relative } from "./format.js";

const WIDTH = 1000;
const LABEL = 170;
const RIGHT = 12;
const ROW = 24;
const BAR = 14;
const AXIS = 22;
const PLOT = WIDTH - LABEL - RIGHT;
// Tick steps in seconds: the first that leaves at most MAX_TICKS intervals on the axis.
const STEPS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
  21600, 43200, 86400, 604800];
const MAX_TICKS = 8;

function short(text, size) {
  return text.length > size ? `${text.slice(0, size - 1)}…` : text;
}

function tickText(seconds) {
  if (seconds === 0) return "0";
  if (seconds < 60) return `+${Number(seconds.toFixed(1))} s`;
  if (seconds < 3600) return `+${Number((seconds / 60).toFixed(1))} min`;
  if (seconds < 86400) return `+${Number((seconds / 3600).toFixed(1))} h`;
  return `+${Number((seconds / 86400).toFixed(1))} d`;
}

// What a run's heartbeats were: "N heartbeats, last at <absolute> (<relative>)".
export function heartbeatsText(run, nowMs) {
  if (!run.heartbeats || !run.last_heartbeat_at) return "no heartbeats";
  const at = run.last_heartbeat_at;
  return `${plural(run.heartbeats, "heartbeat")}, last at ${absolute(at)} (${relative(at, nowMs)})`;
}

// The rows to draw: each run, the gap before a takeover, each durable record; instants in ms.
function rowsOf(job, runs, nowMs) {
  const rows = [];
  runs.forEach((a, i) => {
    const start = parseTime(a.started_at);
    const end = a.finished_at ? parseTime(a.finished_at) : nowMs;
    const previous = i > 0 ? runs[i - 1] : null;
    const tookOver = previous && previous.outcome === "lease_expired" && previous.finished_at;
    const worker = a.worker || "?";
    let label = `#${a.run} ${short(worker, 16)}`;
    if (a.outcome === "running" && job.progress !== null && job.progress !== undefined) {
      label += ` ${Math.round(job.progress * 100)}%`;
    }
    rows.push({
      label,
      run: a,
      start,
      end,
      gap: tookOver ? parseTime(previous.finished_at) : null,
      lease: a.outcome === "running" && job.lease_until ? parseTime(job.lease_until) : null,
      beat: a.heartbeats && a.last_heartbeat_at ? parseTime(a.last_heartbeat_at) : null,
      leaseEnd: a.outcome === "lease_expired" && a.lease_until ? parseTime(a.lease_until) : null,
    });
  });
  for (const step of job.steps || []) {
    if (!step.started_at) continue;
    const start = parseTime(step.started_at);
    const until = step.finished_at || (step.kind === "step" ? null : step.wake_at);
    rows.push({ label: `${step.kind} ${short(step.name, 14)}`, step, start, end: until ? parseTime(until) : nowMs });
  }
  return rows;
}

// A bar from x0 to x1; at least `least` wide, so a run of a few milliseconds still shows.
function bar(x0, x1, y, cls, title, data, least = 0) {
  const rect = s("rect", {
    x: x0.toFixed(2),
    y: y.toFixed(2),
    width: Math.max(least, x1 - x0).toFixed(2),
    height: BAR,
    rx: 2,
    class: cls,
    ...data,
  });
  rect.append(s("title", {}, title));
  return rect;
}

// A thin mark across a row at x, taller than its bar.
function mark(at, y, cls, title, data) {
  const line = s("rect", { x: (at - 1).toFixed(2), y: (y - 3).toFixed(2), width: 2, height: BAR + 6, class: cls, ...data });
  line.append(s("title", {}, title));
  return line;
}

// The timeline, or null for a job no worker has started yet.
export function timelineChart(job, runs, nowMs) {
  const rows = rowsOf(job, runs, nowMs);
  if (!rows.some((row) => row.run)) return null;
  const created = parseTime(job.created_at);
  const t0 = Math.min(created, ...rows.map((row) => row.start));
  const ends = rows.flatMap((row) => [row.end, row.lease || row.end]);
  const t1 = Math.max(t0 + 1000, ...ends);
  const span = t1 - t0;
  const x = (ms) => LABEL + ((ms - t0) / span) * PLOT;
  const height = AXIS + rows.length * ROW + 6;
  const step = STEPS.find((seconds) => (span / 1000) / seconds <= MAX_TICKS) || STEPS[STEPS.length - 1];
  const ticks = [];
  for (let seconds = 0; seconds * 1000 <= span + 1; seconds += step) {
    const at = x(t0 + seconds * 1000);
    ticks.push(
      s("line", { x1: at.toFixed(2), y1: AXIS - 4, x2: at.toFixed(2), y2: height, class: "grid-line" }),
      s("text", { x: at.toFixed(2), y: AXIS - 8, class: at > WIDTH - 30 ? "tick end" : "tick middle" },
        tickText(seconds)));
  }
  // Where the axis starts, absolutely; its ticks count from there.
  ticks.push(s("text", { x: 4, y: AXIS - 8, class: "tick" }, absolute(new Date(t0).toISOString())));
  const drawn = rows.map((row, i) => {
    const y = AXIS + i * ROW + (ROW - BAR) / 2;
    const parts = [s("text", { x: 4, y: y + BAR - 3, class: "row-label" }, row.label)];
    if (row.run) {
      const a = row.run;
      if (row.gap !== null) {
        const gapSeconds = (row.start - row.gap) / 1000;
        parts.push(bar(x(row.gap), x(row.start), y, "gap",
          `waiting for a worker to take it over: ${duration(gapSeconds)}`, { "data-gap": String(a.run) }));
      }
      const took = (row.end - row.start) / 1000;
      const what = a.outcome === "running" ? "running" : a.outcome.replace("_", " ");
      parts.push(bar(x(row.start), x(row.end), y, `run o-${a.outcome}`,
        `#${a.run} on ${a.worker || "?"} (attempt ${a.attempt}): ${what} after ${duration(took)}, `
        + `${absolute(a.started_at)} to ${a.finished_at ? absolute(a.finished_at) : "now"}; `
        + heartbeatsText(a, nowMs),
        { "data-run": String(a.run) }, 2));
      if (row.lease !== null && row.lease > row.end) {
        parts.push(bar(x(row.end), x(row.lease), y, "lease",
          `lease until ${absolute(job.lease_until)}`, { "data-lease": String(a.run) }));
      }
      // A silent worker's run: its last heartbeat, then where its lease ran out, then the
      // takeover (the next row's start).
      if (row.leaseEnd !== null) {
        parts.push(mark(x(row.leaseEnd), y, "lease-end",
          `#${a.run}: its lease ran out at ${absolute(a.lease_until)} (${relative(a.lease_until, nowMs)})`,
          { "data-lease-end": String(a.run) }));
      }
      if (row.beat !== null) {
        parts.push(mark(x(row.beat), y, "beat", `#${a.run}: ${heartbeatsText(a, nowMs)}`,
          { "data-beat": String(a.run) }));
      }
    } else {
      const st = row.step;
      parts.push(bar(x(row.start), x(row.end), y, `step k-${st.kind} st-${st.state}`,
        `${st.kind} ${st.name}: ${st.state}`, { "data-step-bar": st.name }, 2));
    }
    return parts;
  });
  return s("svg", {
    class: "chart job-timeline",
    viewBox: `0 0 ${WIDTH} ${height}`,
    role: "img",
    "aria-label": `Job ${job.id} drawn to scale: ${runs.length} runs over ${duration(span / 1000)}`,
    "data-t0": String(t0),
    "data-t1": String(t1),
  }, ticks, drawn);
}
