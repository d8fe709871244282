// Schedules: each rule with its next runs and its last run's outcome; pause, resume, run now.
// Everything from the server goes in as text (dom.js), never as markup.

import { getJSON, postJSON } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { absolute, badge, parseTime, relative } from "./format.js";
import { notify, poller, reportError } from "./ui.js";

const PATH = (name) => `/api/schedules/${encodeURIComponent(name)}`;

function actions(schedule, config, onDone) {
  if (config.read_only) return [];
  const act = (verb, done) => async () => {
    try {
      const result = await postJSON(`${PATH(schedule.name)}/${verb}`);
      notify(done(result));
    } catch (error) {
      reportError(error);
    }
    onDone();
  };
  const toggle = schedule.paused
    ? h("button", { type: "button", class: "small", "data-action": "resume", on: { click: act("resume", () => `Schedule ${schedule.name} resumed.`) } }, "resume")
    : h("button", { type: "button", class: "small", "data-action": "pause", on: { click: act("pause", () => `Schedule ${schedule.name} paused.`) } }, "pause");
  const runNow = h("button", {
    type: "button",
    class: "small",
    "data-action": "run",
    on: { click: act("run", (job) => `Schedule ${schedule.name}: job ${job.id} enqueued.`) },
  }, "run now");
  return [toggle, runNow];
}

function nextRuns(schedule, nowMs) {
  if (schedule.paused) return h("span", { class: "muted" }, "paused");
  const [next, ...later] = schedule.next_runs;
  if (!next) return h("span", { class: "muted" }, "none");
  return h("div", { class: "next-runs" },
    h("span", { title: absolute(schedule.due_at) }, relative(schedule.due_at, nowMs)),
    " ",
    h("span", { class: "muted" }, `(${absolute(next)})`),
    later.length
      ? h("ul", { class: "later muted" }, later.slice(0, 3).map((at) => h("li", {}, absolute(at))))
      : null);
}

function lastRun(schedule, nowMs) {
  if (schedule.last_job_id === null) return h("span", { class: "muted" }, "never");
  const when = schedule.last_run_at ? relative(schedule.last_run_at, nowMs) : "run now";
  return h("a", { href: `#/jobs/${schedule.last_job_id}`, title: `job ${schedule.last_job_id}` }, when);
}

// Schedules come a page at a time (by name, keyset cursors), so a poll stays small however
// many schedules there are.
const PAGE_SIZE = 50;

export function renderSchedules(root, config) {
  const body = h("tbody");
  const empty = h("p", { class: "muted", hidden: true },
    "No schedules yet. Define them in code with app.schedule(...), or with `rota schedules add`.");
  const cursors = [null];
  const previous = h("button", { type: "button", disabled: true, "data-page": "previous" }, "← previous");
  const next = h("button", { type: "button", disabled: true, "data-page": "next" }, "next →");
  const pageLabel = h("span", { class: "muted" });
  let loop = null;
  previous.addEventListener("click", () => {
    if (cursors.length > 1) cursors.pop();
    loop.refresh();
  });
  next.addEventListener("click", () => {
    if (next.dataset.cursor) cursors.push(next.dataset.cursor);
    loop.refresh();
  });
  root.append(
    h("h1", { text: "Schedules" }),
    h("div", { class: "toolbar" }, previous, next, pageLabel),
    h("table", { class: "grid schedules" },
      h("thead", {}, h("tr", {}, ["name", "kind", "rule", "next run", "last run", "last outcome", "state", ""].map((t) => h("th", { text: t })))),
      body),
    empty,
  );
  loop = poller(async () => {
    const cursor = cursors[cursors.length - 1];
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (cursor) params.set("cursor", cursor);
    const data = await getJSON(`/api/schedules?${params}`);
    const nowMs = parseTime(data.now);
    empty.hidden = data.schedules.length > 0 || cursors.length > 1;
    previous.disabled = cursors.length <= 1;
    next.disabled = !data.next_cursor;
    next.dataset.cursor = data.next_cursor || "";
    pageLabel.textContent = `page ${cursors.length}`;
    replaceChildren(body, data.schedules.map((schedule) => h("tr", { "data-schedule": schedule.name },
      h("td", { class: "mono" }, schedule.name),
      h("td", {}, schedule.kind),
      h("td", {}, schedule.description),
      h("td", {}, nextRuns(schedule, nowMs)),
      h("td", { class: "when" }, lastRun(schedule, nowMs)),
      h("td", {}, schedule.last_outcome ? badge(schedule.last_outcome) : h("span", { class: "muted" }, "—")),
      h("td", {}, badge(schedule.paused ? "paused" : "active")),
      h("td", { class: "row-actions" }, actions(schedule, config, () => loop.refresh())),
    )));
  });
  return loop;
}
