// A workflow, refreshed live: drawn as a graph (workflowgraph.js), or as a table of its jobs in
// id order with their states, how many parents each still waits on and the jobs each runs
// after (links), a page at a time; cancel what has not finished.

import { ApiError, getJSON, postJSON } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { badge, plural } from "./format.js";
import { confirmDialog, poller } from "./ui.js";
import { workflowGraph } from "./workflowgraph.js";

const FINISHED = ["succeeded", "dead", "cancelled"];

function jobLink(jobId) {
  return h("a", { class: "mono", href: `#/jobs/${jobId}` }, String(jobId));
}

function parentsCell(parents) {
  if (!parents.length) return "—";
  return parents.map(([parent, policy], i) => [
    i ? ", " : "",
    jobLink(parent),
    policy === "run" ? h("span", { class: "muted" }, " (runs anyway)") : null,
  ]);
}

function cancelButton(config, workflow, loop) {
  if (config.read_only || workflow.finished) return null;
  return h("button", {
    type: "button",
    class: "danger",
    on: {
      click: () => confirmDialog("Cancel workflow", `Cancel every unfinished job of workflow ${workflow.id}?`,
        "Cancel them", true, async () => {
          const result = await postJSON(`/api/workflows/${workflow.id}/cancel`);
          loop.refresh();
          return `${plural(result.count, "job")} cancelled.`;
        }),
    },
  }, "Cancel workflow…");
}

function heading(config, workflow, loop, asTable) {
  const views = h("div", { class: "view-switch", role: "group", "aria-label": "Show the workflow as" },
    h("a", { href: `#/workflows/${workflow.id}`, "aria-current": asTable ? null : "page" }, "Graph"),
    h("a", { href: `#/workflows/${workflow.id}?view=table`, "aria-current": asTable ? "page" : null }, "Table"));
  return [
    h("h1", {}, "Workflow ", h("span", { class: "mono" }, String(workflow.id)), " ",
      badge(workflow.finished ? "finished" : "running")),
    h("div", { class: "actions" }, views, cancelButton(config, workflow, loop)),
  ];
}

function finishedText(workflow) {
  const done = FINISHED.reduce((n, state) => n + (workflow.by_state[state] || 0), 0);
  return `${done} of ${plural(workflow.total, "job")} finished`;
}

// Shows an unknown workflow's error in place of the page; false for any other error.
function shownMissing(error, id, head, body) {
  if (!(error instanceof ApiError && (error.status === 404 || error.status === 400))) return false;
  replaceChildren(head, h("h1", { text: `Workflow ${id}` }));
  replaceChildren(body, h("p", { class: "error-text" }, error.message));
  return true;
}

export function renderWorkflow(root, config, id, params) {
  const head = h("div", { class: "job-head" });
  const body = h("div");
  root.append(h("a", { class: "back", href: "#/jobs" }, "← jobs"), head, body);
  if (params && params.get("view") === "table") return renderTable(config, id, head, body);
  let loop = null;
  let drawn = null;
  const summary = h("p", { class: "muted workflow-summary" });
  loop = poller(async () => {
    let workflow;
    try {
      workflow = await getJSON(`/api/workflows/${id}/graph`);
    } catch (error) {
      if (shownMissing(error, id, head, body)) return;
      throw error;
    }
    if (!drawn) {
      drawn = workflowGraph(config, workflow.id, () => loop.refresh());
      replaceChildren(body, summary, drawn.element);
    }
    replaceChildren(head, ...heading(config, workflow, loop, false));
    summary.textContent = finishedText(workflow);
    drawn.update(workflow);
  });
  return loop;
}

function renderTable(config, id, head, body) {
  let loop = null;
  // The page of jobs shown: null for the first, else the cursor the API gave for it.
  let cursor = null;
  const turn = (to) => () => {
    cursor = to;
    loop.refresh();
  };
  loop = poller(async () => {
    let workflow;
    try {
      workflow = await getJSON(`/api/workflows/${id}${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ""}`);
    } catch (error) {
      if (shownMissing(error, id, head, body)) return;
      throw error;
    }
    const parents = new Map();
    for (const edge of workflow.edges) {
      if (!parents.has(edge.child)) parents.set(edge.child, []);
      parents.get(edge.child).push([edge.parent, edge.on_parent_failure]);
    }
    const pager = h("div", { class: "pager" },
      cursor ? h("button", { type: "button", on: { click: turn(null) } }, "First jobs") : null,
      workflow.next_cursor ? h("button", { type: "button", on: { click: turn(workflow.next_cursor) } }, "Next jobs") : null);
    replaceChildren(head, ...heading(config, workflow, loop, true));
    replaceChildren(body,
      h("p", { class: "muted workflow-summary" }, finishedText(workflow)),
      h("table", { class: "grid workflow-jobs" },
        h("thead", {}, h("tr", {}, ["id", "kind", "state", "waiting on", "runs after", "last error"].map((t) => h("th", { text: t })))),
        h("tbody", {}, workflow.jobs.map((job) => h("tr", { "data-job": String(job.id) },
          h("td", {}, jobLink(job.id)),
          h("td", { class: "mono" }, job.kind),
          h("td", {}, badge(job.state)),
          h("td", { class: "num" }, job.state === "waiting" ? String(job.waiting_on) : ""),
          h("td", {}, parentsCell(parents.get(job.id) || [])),
          h("td", { class: "attempt-error" }, job.last_error_preview || ""))))),
      workflow.edges_truncated
        ? h("p", { class: "muted" }, "Some of these jobs run after more jobs than listed here: each job's own page lists them all.")
        : null,
      pager);
  });
  return loop;
}
