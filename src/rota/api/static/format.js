// How times, states and numbers read on the dashboard.

import { h } from "./dom.js";

export function parseTime(iso) {
  return iso ? new Date(iso).getTime() : null;
}

function amount(seconds) {
  const abs = Math.abs(seconds);
  if (abs < 10) return `${abs.toFixed(1)} s`;
  if (abs < 90) return `${Math.round(abs)} s`;
  if (abs < 90 * 60) return `${Math.round(abs / 60)} min`;
  if (abs < 36 * 3600) return `${(abs / 3600).toFixed(1)} h`;
  return `${Math.round(abs / 86400)} d`;
}

// "in 3.2 s" or "4 s ago", measured against the server's clock.
export function relative(iso, nowMs) {
  const at = parseTime(iso);
  if (at === null || nowMs === null) return "";
  const seconds = (at - nowMs) / 1000;
  if (Math.abs(seconds) < 0.05) return "now";
  return seconds > 0 ? `in ${amount(seconds)}` : `${amount(seconds)} ago`;
}

export function duration(seconds) {
  return seconds === null || seconds === undefined ? "" : amount(seconds);
}

// Instants read in UTC (the default, as the server and the logs speak) or in the browser's
// own zone; the choice is remembered in localStorage.
const TIME_KEY = "rota.time";

export function timeMode() {
  try {
    return localStorage.getItem(TIME_KEY) === "local" ? "local" : "utc";
  } catch {
    return "utc";
  }
}

export function setTimeMode(mode) {
  try {
    localStorage.setItem(TIME_KEY, mode === "local" ? "local" : "utc");
  } catch {
    // storage refused (private mode): the choice lasts until the page reloads
  }
}

const pad = (n) => String(n).padStart(2, "0");

function localText(iso) {
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return iso;
  const zone = new Intl.DateTimeFormat("en-US", { timeZoneName: "short" })
    .formatToParts(at).find((part) => part.type === "timeZoneName");
  const day = `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}`;
  const time = `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`;
  return `${day} ${time} ${zone ? zone.value : "local"}`;
}

export function absolute(iso) {
  if (!iso) return "";
  if (timeMode() === "local") return localText(iso);
  return `${iso.replace("T", " ").replace(/\.\d+/, "").replace("Z", "")} UTC`;
}

// The job states, as the API names them (rota.domain.job_state.JobState), in the order a job
// meets them: the state tabs, the overview's and the queues' columns.
export const STATES = ["waiting", "pending", "held", "running", "succeeded", "dead", "cancelled"];

// One vocabulary: a badge names the state as the API does (waiting, pending, held, running,
// succeeded, dead, cancelled); what a pending job waits for is said beside it (stateNote).
export function stateNote(job, nowMs) {
  if (job.state !== "pending") return null;
  const parts = [];
  const runAt = parseTime(job.run_at);
  if (runAt !== null && nowMs !== null && runAt > nowMs) parts.push(`due ${relative(job.run_at, nowMs)}`);
  if (job.attempt > 0) parts.push(`attempt ${job.attempt + 1} next`);
  if (!parts.length) return null;
  return h("span", { class: "state-note muted", title: absolute(job.run_at) }, parts.join(", "));
}

// A job's state: its badge, and the note on a pending job that is not yet due or retries.
export function stateCell(job, nowMs) {
  const note = stateNote(job, nowMs);
  return note ? [badge(job.state), " ", note] : badge(job.state);
}

// "1 job", "3 jobs": a count and its noun, singular or plural as the count asks.
export function plural(n, noun, nouns = `${noun}s`) {
  return `${count(n)} ${Number(n) === 1 ? noun : nouns}`;
}

export function badge(label) {
  return h("span", { class: `badge s-${label}`, text: label });
}

// A running job's progress, as its handler last reported it: a bar and the message, as text.
// With `finished`, a succeeded job's too (its progress is 1: it did all its work).
export function progressBar(job, { finished = false } = {}) {
  const shown = job.state === "running" || (finished && job.state === "succeeded");
  if (!shown || job.progress === null || job.progress === undefined) return null;
  const percent = `${Math.round(job.progress * 100)}%`;
  const label = job.progress_message ? `${percent} ${job.progress_message}` : percent;
  return h("span", { class: "progress", title: label },
    h("progress", { max: "1", value: String(job.progress) }),
    h("span", { class: "progress-text", text: label }));
}

export function count(n, exact = true) {
  return `${exact ? "" : "about "}${Number(n).toLocaleString("en-US")}`;
}

// An estimated count, rounded as a person says it: "about 1.2M", "about 45K", "about 1,001".
export function about(n) {
  for (const [from, size, unit] of [[1e6, 1e6, "M"], [1e4, 1e3, "K"]]) {
    if (n >= from) return `about ${Number((n / size).toFixed(n >= 100 * size ? 0 : 1))}${unit}`;
  }
  return `about ${Number(n).toLocaleString("en-US")}`;
}

// "minute", "5 min", "90 s": a rate limit's period, exactly (never rounded).
export function period(seconds) {
  const names = { 1: "second", 60: "minute", 3600: "hour", 86400: "day" };
  if (names[seconds]) return names[seconds];
  for (const [unit, size] of [["h", 3600], ["min", 60]]) {
    if (seconds % size === 0) return `${seconds / size} ${unit}`;
  }
  return `${seconds} s`;
}

// "100 / minute", or "" for a limit without a rate.
export function rateText(limit) {
  return limit.rate === null ? "" : `${limit.rate} / ${period(limit.period_seconds)}`;
}

// "kind pdf", "every tenant": what a limit applies to.
export function limitTarget(limit) {
  return limit.scope === "tenant" && limit.key === "*" ? "every tenant" : `${limit.scope} ${limit.key}`;
}

// Whether this identity may delete jobs and change limits and schedules: the admin role only
// (an operator may retry, cancel, hold, pause and enqueue; the server answers 403 otherwise).
export function canAdminister(config) {
  return !config.read_only && config.role === "admin";
}
