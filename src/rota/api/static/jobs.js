// Jobs: state tabs with counts, filters, search, live refresh with a pause switch, keyset
// pages, why a pending job is not running, and the verbs on a selection of rows or on every
// job matching the filter (each after a dialog that says its scope).

import { deleteJSON, getJSON, postJSON, query } from "./api.js";
import { appendChildren, h, replaceChildren } from "./dom.js";
import { about, canAdminister, count, parseTime, plural, progressBar, relative, stateCell, STATES } from "./format.js";
import {
  confirmDialog, filterFrom, notify, pager, poller, presets, reportError, submitsToHash,
} from "./ui.js";

const FILTER_FIELDS = ["state", "kind", "queue", "tenant", "q"];
const PAGE_SIZE = 50;

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
  if (job.state === "held") return job.waiting_on ? `held, waiting on ${job.waiting_on}` : `held, due ${relative(job.run_at, now)}`;
  if (job.state === "waiting") return `waiting on ${job.waiting_on}`;
  return relative(job.finished_at, now);
}

// Why a waiting or pending job is not running, as the server worked it out (blocked_by): a
// short line under its state, each reason's message in full in the title.
const BLOCKED_LABELS = {
  held: "held",
  waiting_on_parents: "parents",
  not_due: "not due",
  queue_paused: "queue paused",
  queue_limit: "queue limit",
  kind_limit: "kind limit",
  tenant_limit: "tenant limit",
  kind_rate: "kind rate",
  tenant_rate: "tenant rate",
  no_worker: "no worker",
  no_worker_for_kind: "no worker for kind",
};

export function blockedLabel(blocker) {
  return `${BLOCKED_LABELS[blocker.reason] || blocker.reason}${blocker.certain ? "" : "?"}`;
}

function blockedLine(job) {
  // Waiting and not-due jobs say so in the "when" column already.
  const shown = (job.blocked_by || []).filter((b) => !["held", "waiting_on_parents", "not_due"].includes(b.reason));
  if (!shown.length) return null;
  return h("div", { class: "blocked", title: shown.map((b) => b.message).join("; ") },
    shown.map((b) => h("span", { class: `blocker b-${b.reason}`, "data-blocker": b.reason }, blockedLabel(b))));
}

export function actionButtons(job, config, onDone) {
  if (config.read_only) return [];
  const buttons = [];
  const act = (verb) => async () => {
    try {
      await postJSON(`/api/jobs/${job.id}/${verb}`);
      notify(`Job ${job.id}: ${VERBS[verb].done.toLowerCase()}.`);
    } catch (error) {
      reportError(error);
    }
    onDone();
  };
  if (job.state === "dead" || job.state === "cancelled") {
    buttons.push(h("button", { type: "button", class: "small", "data-action": "retry", on: { click: act("retry") } }, "retry"));
  }
  if (job.state === "held") {
    buttons.push(h("button", { type: "button", class: "small", "data-action": "release", on: { click: act("release") } }, "release"));
  }
  if (VERBS.cancel.states.includes(job.state)) {
    buttons.push(h("button", { type: "button", class: "small", "data-action": "cancel", on: { click: act("cancel") } }, "cancel"));
  }
  return buttons;
}

// What each verb acts on, for selections and filters alike.
const VERBS = {
  retry: { states: ["dead", "cancelled"], which: "dead or cancelled", done: "Retried", label: "Retry" },
  cancel: { states: ["waiting", "pending", "held", "running"], which: "waiting, pending, held or running", done: "Cancelled", label: "Cancel" },
  delete: { states: ["waiting", "pending", "held", "succeeded", "dead", "cancelled"], which: "not running", done: "Deleted", label: "Delete" },
  hold: { states: ["waiting", "pending"], which: "waiting or pending", done: "Held", label: "Hold" },
  release: { states: ["held"], which: "held", done: "Released", label: "Release" },
};

// The verbs whose confirmation button reads as dangerous: they end or remove jobs.
const DESTRUCTIVE = new Set(["cancel", "delete"]);

function act(verb, jobId) {
  return verb === "delete" ? deleteJSON(`/api/jobs/${jobId}`) : postJSON(`/api/jobs/${jobId}/${verb}`);
}

function idList(ids) {
  const shown = ids.slice(0, 10).join(", ");
  return ids.length > 10 ? `${shown} and ${ids.length - 10} more` : shown;
}

function errorPreview(job) {
  if (!job.last_error_preview) return "";
  return job.last_error_truncated ? `${job.last_error_preview}…` : job.last_error_preview;
}

function tabHash(filter, state) {
  const next = {};
  for (const field of FILTER_FIELDS) next[field] = filter[field] || "";
  next.state = state;
  return `#/jobs${query(next)}`;
}

export function renderJobs(root, config, params) {
  const filter = filterFrom(params, FILTER_FIELDS);
  let loop = null;
  const pages = pager(() => loop);
  // Selected job ids (kept across refreshes and pages) and the last state seen of each.
  const selected = new Map();

  const tabs = h("nav", { class: "tabs", "aria-label": "job states" },
    ["", ...STATES].map((st) => h("a", {
      href: tabHash(filter, st),
      class: (filter.state || "") === st ? "tab active" : "tab",
      "data-tab": st || "all",
    }, st || "all", " ", h("span", { class: "tab-count" }))));

  function showCounts(data) {
    let total = 0;
    for (const st of STATES) total += data.counts[st] || 0;
    const estimated = new Set(data.estimated);
    const shown = (st, n) => (estimated.has(st) || (st === "" && estimated.size) ? about(n) : count(n, data.exact));
    for (const link of tabs.querySelectorAll("a")) {
      const st = link.dataset.tab === "all" ? "" : link.dataset.tab;
      link.querySelector(".tab-count").textContent = shown(st, st ? data.counts[st] || 0 : total);
    }
  }

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
  submitsToHash(form, "jobs", FILTER_FIELDS, () => loop.refresh());

  const bulk = config.read_only ? null : h("span", { class: "bulk" },
    h("button", { type: "button", "data-bulk": "retry", on: { click: () => bulkAction("retry") } }, "Retry matching…"),
    h("button", { type: "button", "data-bulk": "hold", on: { click: () => bulkAction("hold") } }, "Hold matching…"),
    h("button", { type: "button", "data-bulk": "release", on: { click: () => bulkAction("release") } }, "Release matching…"),
    h("button", { type: "button", class: "danger", "data-bulk": "cancel", on: { click: () => bulkAction("cancel") } }, "Cancel matching…"),
    canAdminister(config) ? h("button", { type: "button", class: "danger", "data-bulk": "delete", on: { click: () => bulkAction("delete") } }, "Delete matching…") : null);

  const selectedLabel = h("span", { class: "selected-count" });
  const selectionBar = config.read_only ? null : h("div", { class: "selection", hidden: true },
    selectedLabel,
    h("button", { type: "button", "data-selection": "retry", on: { click: () => selectionAction("retry") } }, "Retry selected…"),
    h("button", { type: "button", "data-selection": "hold", on: { click: () => selectionAction("hold") } }, "Hold selected…"),
    h("button", { type: "button", "data-selection": "release", on: { click: () => selectionAction("release") } }, "Release selected…"),
    h("button", { type: "button", class: "danger", "data-selection": "cancel", on: { click: () => selectionAction("cancel") } }, "Cancel selected…"),
    canAdminister(config) ? h("button", { type: "button", class: "danger", "data-selection": "delete", on: { click: () => selectionAction("delete") } }, "Delete selected…") : null,
    h("button", { type: "button", class: "link", "data-selection": "clear", on: { click: () => { selected.clear(); syncSelection(); } } }, "clear selection"));
  const selectAll = config.read_only ? null : h("input", { type: "checkbox", class: "select-all", "aria-label": "select every job on this page" });
  if (selectAll) {
    selectAll.addEventListener("change", () => {
      for (const box of rows.querySelectorAll("input.select-row")) {
        box.checked = selectAll.checked;
        if (selectAll.checked) selected.set(Number(box.dataset.job), box.dataset.state);
        else selected.delete(Number(box.dataset.job));
      }
      syncSelection();
    });
  }

  function syncSelection() {
    if (!selectionBar) return;
    selectionBar.hidden = selected.size === 0;
    selectedLabel.textContent = `${count(selected.size)} selected`;
    const boxes = [...rows.querySelectorAll("input.select-row")];
    for (const box of boxes) box.checked = selected.has(Number(box.dataset.job));
    selectAll.checked = boxes.length > 0 && boxes.every((box) => box.checked);
  }

  function rowBox(job) {
    if (config.read_only) return null;
    const box = h("input", {
      type: "checkbox",
      class: "select-row",
      "data-job": String(job.id),
      "data-state": job.state,
      "aria-label": `select job ${job.id}`,
      checked: selected.has(job.id),
    });
    box.addEventListener("change", () => {
      if (box.checked) selected.set(job.id, job.state);
      else selected.delete(job.id);
      syncSelection();
    });
    return h("td", { class: "select" }, box);
  }

  // The verb on the selected jobs it applies to (by their last state seen), one request
  // each; a job whose state changed meanwhile is refused by the server and reported.
  function selectionAction(verb) {
    const spec = VERBS[verb];
    const all = [...selected.keys()].sort((a, b) => a - b);
    const ids = all.filter((jobId) => spec.states.includes(selected.get(jobId)));
    const left = all.length - ids.length;
    const leftText = left ? ` ${plural(left, "selected job")} that ${left === 1 ? "is" : "are"} not ${spec.which} ${left === 1 ? "is" : "are"} left alone.` : "";
    if (!ids.length) {
      confirmDialog(`${spec.label} selected`, `${all.length === 1 ? "The selected job is not" : `None of the ${plural(all.length, "selected job")} is`} ${spec.which}; nothing to do.`, "", false, null);
      return;
    }
    const undo = verb === "delete" ? " Their history goes too; this cannot be undone." : "";
    const message = `${spec.label} ${count(ids.length)} selected ${spec.which} ${ids.length === 1 ? "job" : "jobs"}: ${idList(ids)}?${leftText}${undo}`;
    confirmDialog(`${spec.label} selected`, message, `${spec.label} them`, DESTRUCTIVE.has(verb), async () => {
      const refused = [];
      let done = 0;
      for (const jobId of ids) {
        try {
          await act(verb, jobId);
          done += 1;
          selected.delete(jobId);
        } catch (error) {
          refused.push(`job ${jobId}: ${error.message}`);
        }
      }
      syncSelection();
      loop.refresh();
      const summary = `${spec.done} ${plural(done, "job")}.`;
      return refused.length ? `${summary} Refused: ${refused.join("; ")}.` : summary;
    });
  }

  async function bulkAction(verb) {
    const scope = describe(filter);
    let counted;
    try {
      counted = await getJSON(`/api/jobs/count${query({ ...filter, action: verb })}`);
    } catch (error) {
      reportError(error);
      return;
    }
    // Deleting by filter purges finished jobs only (a pending one is deleted on its own).
    const which = verb === "delete" ? "finished (succeeded, dead or cancelled)" : VERBS[verb].which;
    if (counted.count === 0) {
      confirmDialog(`Bulk ${verb}`, `No ${which} jobs match ${scope}; nothing to do.`, "", false, null);
      return;
    }
    const amount = counted.capped ? `the first ${count(counted.count)} (more match)` : count(counted.count);
    const undo = verb === "delete" ? " Their history goes too; this cannot be undone." : "";
    const message = `${VERBS[verb].label} ${amount} ${which} ${counted.count === 1 && !counted.capped ? "job" : "jobs"} matching ${scope}?${undo}`;
    confirmDialog(`Bulk ${verb}`, message, `${VERBS[verb].label} them`, DESTRUCTIVE.has(verb), async () => {
      const body = { ...filter };
      if (body.state) body.state = body.state.split(",").map((st) => st.trim()).filter(Boolean);
      const result = await postJSON(`/api/jobs/bulk/${verb}`, body);
      loop.refresh();
      return `${VERBS[verb].done} ${plural(result.count, "job")}.`;
    });
  }

  const rows = h("tbody");
  const empty = h("p", { class: "muted", hidden: true }, "No jobs match.");
  appendChildren(root,
    h("div", { class: "job-head" }, h("h1", { text: "Jobs" }),
      config.read_only ? null : h("a", { class: "button-link primary", href: "#/jobs/new", "data-action": "new-job" }, "+ New job")),
    presets(config, () => loop && loop.refresh()),
    tabs,
    form,
    h("div", { class: "toolbar" }, pages.controls, bulk),
    selectionBar,
    h("table", { class: "grid jobs" },
      h("thead", {}, h("tr", {},
        selectAll ? h("th", { class: "select" }, selectAll) : null,
        ["id", "kind", "queue", "state", "attempt", "prio", "tenant", "when", "worker", "last error", ""].map((t) =>
          h("th", { class: t === "attempt" || t === "prio" ? "num" : null, text: t })))),
      rows),
    empty,
  );

  loop = poller(async () => {
    const cursor = pages.cursor();
    const { state: _state, ...others } = filter;
    const [data, counts] = await Promise.all([
      getJSON(`/api/jobs${query({ ...filter, cursor, limit: PAGE_SIZE })}`),
      getJSON(`/api/jobs/counts${query(others)}`),
    ]);
    showCounts(counts);
    const now = parseTime(data.now);
    for (const job of data.jobs) {
      if (selected.has(job.id)) selected.set(job.id, job.state);
    }
    empty.hidden = data.jobs.length > 0;
    pages.show(data.next_cursor);
    replaceChildren(rows, data.jobs.map((job) => h("tr", { "data-job": String(job.id) },
      rowBox(job),
      h("td", { class: "mono" }, h("a", { href: `#/jobs/${job.id}` }, String(job.id))),
      h("td", { class: "kind" }, h("a", { class: "quiet", href: `#/kinds/${encodeURIComponent(job.kind)}` }, job.kind)),
      h("td", {}, h("a", { class: "quiet", href: `#/queues/${encodeURIComponent(job.queue)}` }, job.queue)),
      h("td", {}, stateCell(job, now), progressBar(job), blockedLine(job)),
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
    syncSelection();
  });
  return loop;
}
