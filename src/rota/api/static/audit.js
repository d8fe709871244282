// Audit: every operator action (API, dashboard, CLI) with who, when, what and how many jobs;
// filters in the hash, keyset pages, live refresh. Everything shown is text, never HTML.

import { getJSON, query } from "./api.js";
import { appendChildren, h, replaceChildren } from "./dom.js";
import { absolute, parseTime, relative } from "./format.js";
import { filterFrom, pager, poller, submitsToHash } from "./ui.js";

// The actions of rota.domain.audit.AuditAction.
const ACTIONS = [
  "job.create", "job.retry", "job.cancel", "job.rerun", "job.delete", "job.reschedule",
  "job.hold", "job.release", "jobs.retry", "jobs.cancel", "jobs.purge", "jobs.hold",
  "jobs.release",
  "queue.pause", "queue.resume", "limit.set", "limit.delete",
  "schedule.create", "schedule.replace", "schedule.pause", "schedule.resume",
  "schedule.delete", "schedule.run", "workflow.cancel",
  "workflow.node.retry", "workflow.node.cancel", "signal.send",
];
const PERIODS = [
  ["", "any time"],
  ["1h", "last hour", 3600],
  ["24h", "last 24 hours", 86400],
  ["7d", "last 7 days", 7 * 86400],
  ["30d", "last 30 days", 30 * 86400],
];
const FILTER_FIELDS = ["action", "identity", "target", "period"];
const PAGE_SIZE = 50;

// The API's filters: a period becomes `since`, that long before now.
function apiFilter(filter) {
  const { period, ...rest } = filter;
  const known = PERIODS.find(([key]) => key === period);
  if (known && known[2]) rest.since = new Date(Date.now() - known[2] * 1000).toISOString();
  return rest;
}

// Where a target lives on the dashboard, when it has a page.
function targetCell(target) {
  if (!target) return "";
  const job = /^job:(\d+)$/.exec(target);
  if (job) return h("a", { href: `#/jobs/${job[1]}` }, target);
  const workflow = /^workflow:(\d+)$/.exec(target);
  if (workflow) return h("a", { href: `#/workflows/${workflow[1]}` }, target);
  if (/^schedule:/.test(target)) return h("a", { href: "#/schedules" }, target);
  if (/^(queue|limit):/.test(target)) return h("a", { href: "#/queues" }, target);
  return target;
}

function fields(object) {
  if (!object) return "";
  return Object.entries(object)
    .map(([key, value]) => `${key} ${Array.isArray(value) ? value.join(",") : String(value)}`)
    .join(", ");
}

export function renderAudit(root, config, params) {
  const filter = filterFrom(params, FILTER_FIELDS);
  let loop = null;
  const pages = pager(() => loop);

  const actionSelect = h("select", { name: "action" },
    h("option", { value: "" }, "any action"),
    ACTIONS.map((a) => h("option", { value: a, selected: filter.action === a }, a)));
  const periodSelect = h("select", { name: "period" },
    PERIODS.map(([key, label]) => h("option", { value: key, selected: (filter.period || "") === key }, label)));
  const text = (name, label) => h("label", { class: "field" }, h("span", { text: label }),
    h("input", { name, value: filter[name] || "", autocomplete: "off", spellcheck: "false" }));
  const form = h("form", { class: "filters", "data-filters": "audit" },
    h("label", { class: "field" }, h("span", { text: "action" }), actionSelect),
    text("identity", "identity"),
    text("target", "target"),
    h("label", { class: "field" }, h("span", { text: "when" }), periodSelect),
    h("button", { type: "submit" }, "Apply"),
    h("a", { class: "button-link", href: "#/audit" }, "Clear"));
  submitsToHash(form, "audit", FILTER_FIELDS, () => loop.refresh());

  const rows = h("tbody");
  const empty = h("p", { class: "muted", hidden: true }, "No operator actions match.");
  appendChildren(root,
    h("h1", { text: "Audit" }),
    h("p", { class: "muted" },
      `Operator actions from the API, the dashboard and the CLI. You are ${config.identity || "anonymous"}.`),
    form,
    h("div", { class: "toolbar" }, pages.controls),
    h("table", { class: "grid audit" },
      h("thead", {}, h("tr", {}, ["when", "identity", "action", "target", "filter", "detail", "jobs"].map((t) =>
        h("th", { class: t === "jobs" ? "num" : null, text: t })))),
      rows),
    empty,
  );

  loop = poller(async () => {
    const cursor = pages.cursor();
    const data = await getJSON(`/api/audit${query({ ...apiFilter(filter), cursor, limit: PAGE_SIZE })}`);
    const now = parseTime(data.now);
    empty.hidden = data.entries.length > 0;
    pages.show(data.next_cursor);
    replaceChildren(rows, data.entries.map((entry) => h("tr", { "data-audit": String(entry.id) },
      h("td", { class: "when", title: absolute(entry.at) }, relative(entry.at, now)),
      h("td", { class: "mono identity" }, entry.identity),
      h("td", { class: "mono action" }, entry.action),
      h("td", { class: "mono target" }, targetCell(entry.target)),
      h("td", { class: "filter" }, fields(entry.filter)),
      h("td", { class: "detail" }, fields(entry.detail)),
      h("td", { class: "num count" }, entry.count === null ? "" : String(entry.count)),
    )));
  });
  return loop;
}
