// Jobs: filters, search, live refresh with a pause switch, keyset pages, bulk retry and cancel.

import { getJSON, postJSON, query } from "./api.js";
import { appendChildren, h, replaceChildren } from "./dom.js";
import { badge, count, displayState, parseTime, progressBar, relative } from "./format.js";
import { confirmDialog, notify, poller, presets, reportError } from "./ui.js";

const STATES = ["waiting", "pending", "running", "succeeded", "dead", "cancelled"];
const FILTER_FIELDS = ["state", "kind", "queue", "tenant", "q"];
const PAGE_SIZE = 50;

function filterFrom(params) {
  const filter = {};
  for (const field of FILTER_FIELDS) {
    const value = (params.get(field) || "").trim();
    if (value) filter[field] = value;
  }
  return filter;
}

function describe(filter) {
  const parts = FILTER_FIELDS.filter((f) => filter[f]).map((f) => `${f === "q" ? "search" : f} = ${filter[f]}`);
  return parts.length ? parts.join(", ") : "all jobs";
}

function input(name, label, value) {
  return h("label", { class: "field" }, h("span", { text: label }),
    h("input", { name, value: value || "", autocomplete: "off", spellcheck: "false" }));
}

function whenCell(job, now) {
  if (job.state === "running") return `lease ${relative(job.lease_until, now)}`;
  if (job.state === "pending") return relative(job.run_at, now);
  if (job.state === "waiting") return `waiting on ${job.waiting_on}`;
  return relative(job.finished_at, now);
}

export function actionButtons(job, config, onDone) {
  if (config.read_only) return [];
  const buttons = [];
  const act = (verb) => async () => {
    try {
      await postJSON(`/api/jobs/${job.id}/${verb}`);
      notify(`Job ${job.id}: ${verb === "retry" ? "retried" : "cancelled"}.`);
    } catch (error) {
      reportError(error);
    }
    onDone();
  };
  if (job.state === "dead" || job.state === "cancelled") {
    buttons.push(h("button", { type: "button", class: "small", "data-action": "retry", on: { click: act("retry") } }, "retry"));
  }
  if (job.state === "waiting" || job.state === "pending" || job.state === "running") {
    buttons.push(h("button", { type: "button", class: "small", "data-action": "cancel", on: { click: act("cancel") } }, "cancel"));
  }
  return buttons;
}

function errorPreview(job) {
  if (!job.last_error_preview) return "";
  return job.last_error_truncated ? `${job.last_error_preview}…` : job.last_error_preview;
}

export function renderJobs(root, config, params) {
  const filter = filterFrom(params);
  const cursors = [null];
  let loop = null;

  const stateSelect = h("select", { name: "state" },
    h("option", { value: "" }, "any state"),
    STATES.map((st) => h("option", { value: st, selected: filter.state === st }, st)));
  const form = h("form", { class: "filters" },
    h("label", { class: "field" }, h("span", { text: "state" }), stateSelect),
    input("kind", "kind", filter.kind),
    input("queue", "queue", filter.queue),
    input("tenant", "tenant", filter.tenant),
    input("q", "id or unique key", filter.q),
    h("button", { type: "submit" }, "Apply"),
    h("a", { class: "button-link", href: "#/jobs" }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = {};
    for (const field of FILTER_FIELDS) next[field] = (data.get(field) || "").trim();
    const hash = `#/jobs${query(next)}`;
    if (location.hash === hash) loop.refresh();
    else location.hash = hash;
  });

  const live = h("input", { type: "checkbox", checked: true });
  live.addEventListener("change", () => loop.setPaused(!live.checked));
  const newer = h("button", { type: "button", disabled: true }, "← newer");
  const older = h("button", { type: "button", disabled: true }, "older →");
  const pageLabel = h("span", { class: "muted" });
  newer.addEventListener("click", () => {
    if (cursors.length > 1) cursors.pop();
    loop.refresh();
  });
  older.addEventListener("click", () => {
    if (older.dataset.cursor) cursors.push(older.dataset.cursor);
    loop.refresh();
  });

  const bulk = config.read_only ? null : h("span", { class: "bulk" },
    h("button", { type: "button", on: { click: () => bulkAction("retry") } }, "Retry matching…"),
    h("button", { type: "button", class: "danger", on: { click: () => bulkAction("cancel") } }, "Cancel matching…"));

  async function bulkAction(verb) {
    const scope = describe(filter);
    let counted;
    try {
      counted = await getJSON(`/api/jobs/count${query({ ...filter, action: verb })}`);
    } catch (error) {
      reportError(error);
      return;
    }
    const which = verb === "retry" ? "dead or cancelled" : "waiting, pending or running";
    if (counted.count === 0) {
      confirmDialog(`Bulk ${verb}`, `No ${which} jobs match ${scope}; nothing to do.`, "", false, null);
      return;
    }
    const amount = counted.capped ? `the first ${count(counted.count)} (more match)` : count(counted.count);
    const message = `${verb === "retry" ? "Retry" : "Cancel"} ${amount} ${which} job(s) matching ${scope}?`;
    confirmDialog(`Bulk ${verb}`, message, verb === "retry" ? "Retry them" : "Cancel them", verb === "cancel", async () => {
      const body = { ...filter };
      if (body.state) body.state = body.state.split(",").map((st) => st.trim()).filter(Boolean);
      const result = await postJSON(`/api/jobs/bulk/${verb}`, body);
      loop.refresh();
      return `${verb === "retry" ? "Retried" : "Cancelled"} ${count(result.count)} job(s).`;
    });
  }

  const rows = h("tbody");
  const empty = h("p", { class: "muted", hidden: true }, "No jobs match.");
  appendChildren(root,
    h("h1", { text: "Jobs" }),
    presets(config, () => loop && loop.refresh()),
    form,
    h("div", { class: "toolbar" },
      h("label", { class: "switch" }, live, " live"),
      newer, older, pageLabel, bulk),
    h("table", { class: "grid jobs" },
      h("thead", {}, h("tr", {}, ["id", "kind", "queue", "state", "attempt", "prio", "tenant", "when", "worker", "last error", ""].map((t) =>
        h("th", { class: t === "attempt" || t === "prio" ? "num" : null, text: t })))),
      rows),
    empty,
  );

  loop = poller(async () => {
    const cursor = cursors[cursors.length - 1];
    const data = await getJSON(`/api/jobs${query({ ...filter, cursor, limit: PAGE_SIZE })}`);
    const now = parseTime(data.now);
    empty.hidden = data.jobs.length > 0;
    newer.disabled = cursors.length <= 1;
    older.disabled = !data.next_cursor;
    older.dataset.cursor = data.next_cursor || "";
    pageLabel.textContent = `page ${cursors.length}`;
    replaceChildren(rows, data.jobs.map((job) => h("tr", { "data-job": String(job.id) },
      h("td", { class: "mono" }, h("a", { href: `#/jobs/${job.id}` }, String(job.id))),
      h("td", { class: "kind" }, job.kind),
      h("td", {}, job.queue),
      h("td", {}, badge(displayState(job, now)), progressBar(job)),
      h("td", { class: "num" }, `${job.attempt}/${job.max_attempts}`),
      h("td", { class: "num" }, String(job.priority)),
      h("td", {}, job.tenant || ""),
      h("td", { class: "when" }, whenCell(job, now)),
      h("td", { class: "mono" }, job.worker || ""),
      // The last error of a job that later succeeded is history, not a problem.
      // Lists carry a preview; the job's page has the whole error.
      h("td", { class: job.state === "succeeded" ? "error-cell muted" : "error-cell", title: errorPreview(job) }, errorPreview(job)),
      h("td", { class: "row-actions" }, actionButtons(job, config, () => loop.refresh())),
    )));
  });
  return loop;
}
