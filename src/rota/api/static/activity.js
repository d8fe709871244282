// A queue's or a kind's page: charts over a chosen window (throughput, failures, p50 and p95
// run time, p95 wait from due to start) from the per-minute tallies, the most frequent errors
// grouped by message, and what holds its jobs back right now. Everything from the server goes
// in as text (dom.js).

import { getJSON, query } from "./api.js";
import { appendChildren, h, replaceChildren } from "./dom.js";
import { absolute, badge, count, relative, parseTime } from "./format.js";
import { barChart, lineChart, took } from "./series.js";
import { poller } from "./ui.js";

const WINDOWS = [["1h", "hour", "1 h"], ["6h", "6 hours", "6 h"], ["24h", "24 hours", "24 h"]];
const STATES = ["waiting", "pending", "running", "succeeded", "dead", "cancelled"];

function chartBox(title, legend, figure) {
  return h("section", { class: "chart-panel" },
    h("h2", {}, title),
    legend ? h("div", { class: "legend" }, legend) : null,
    h("div", { class: "chart-box" }, figure));
}

function key(cls, text) {
  return [h("span", { class: `key ${cls}` }), `${text} `];
}

function windowPicker(scope, name, current) {
  const select = h("select", { id: "activity-window", name: "window" },
    WINDOWS.map(([value, , text]) => h("option", { value, selected: value === current }, `last ${text}`)));
  select.addEventListener("change", () => {
    location.hash = `#/${scope}/${encodeURIComponent(name)}${query({ window: select.value })}`;
  });
  return h("label", { class: "switch", for: "activity-window" }, "window ", select);
}

function summary(totals, windowName) {
  const parts = [
    `${totals.succeeded} succeeded`,
    `${totals.failed} failed`,
    `${totals.dead} dead`,
    `p50 run ${took(totals.p50_run_seconds)}`,
    `p95 run ${took(totals.p95_run_seconds)}`,
    `p95 wait ${took(totals.p95_wait_seconds)}`,
  ];
  return `Last ${windowName}: ${parts.join(", ")}.`;
}

function heldList(held, what) {
  if (!held.length) {
    return h("p", { class: "muted", "data-held": "none" },
      `Nothing holds this ${what} back: its jobs start once due, as workers have room.`);
  }
  return h("ul", { class: "why" }, held.map((b) => h("li", { "data-reason": b.reason },
    h("span", { class: "blocker" }, b.reason.replaceAll("_", " ")), " ", b.message,
    b.certain ? null : h("span", { class: "muted" }, " (may not apply to every job)"))));
}

function errorRows(errors, nowMs) {
  if (!errors.length) {
    return h("tr", {}, h("td", { class: "muted", colspan: 3 }, "No failed attempt in this window."));
  }
  return errors.map((group) => h("tr", { "data-error": group.fingerprint },
    h("td", { class: "num", "data-count": String(group.count) }, String(group.count)),
    h("td", {},
      h("div", { class: "mono" }, group.fingerprint),
      group.sample !== group.fingerprint
        ? h("div", { class: "muted sample", title: group.sample }, "latest: ", group.sample) : null),
    h("td", { class: "when", title: absolute(group.last_at) }, relative(group.last_at, nowMs))));
}

function countCards(counts, scope, name) {
  if (!counts) return null;
  return h("div", { class: "cards" }, STATES.map((st) => h("a", {
    class: "card-link",
    href: `#/jobs${query({ state: st, [scope === "queues" ? "queue" : "kind"]: name })}`,
  }, h("div", { class: "card", "data-state": st },
    h("div", { class: "card-label" }, badge(st)),
    h("div", { class: "card-value" }, count(counts[st] || 0))))));
}

// scope: "queues" or "kinds"; name: the queue's or kind's name.
export function renderActivity(root, scope, name, params) {
  const windowValue = WINDOWS.some(([value]) => value === params.get("window")) ? params.get("window") : "1h";
  const [, windowName, span] = WINDOWS.find(([value]) => value === windowValue);
  const what = scope === "queues" ? "queue" : "kind";
  const filter = { [what]: name };
  const line = h("p", { class: "activity-summary", "aria-live": "polite" });
  const cards = h("div");
  const held = h("div", { class: "held" });
  const charts = h("div", { class: "activity-charts" });
  const errors = h("tbody");
  appendChildren(root,
    h("div", { class: "job-head" },
      h("h1", {}, `${what[0].toUpperCase()}${what.slice(1)} `, h("span", { class: "mono" }, name)),
      h("div", { class: "toolbar" },
        windowPicker(scope, name, windowValue),
        h("a", { class: "button-link small", href: `#/jobs${query(filter)}` }, `jobs of this ${what}`),
        h("a", { class: "button-link small", href: `#/jobs${query({ ...filter, state: "dead" })}` }, "dead jobs"))),
    line,
    cards,
    h("h2", {}, "What holds it back now"),
    held,
    charts,
    h("h2", {}, "Most frequent errors"),
    h("table", { class: "grid errors" },
      h("thead", {}, h("tr", {},
        h("th", { class: "num" }, "attempts"), h("th", {}, "error (numbers, ids and quoted text folded)"),
        h("th", {}, "last one's minute"))),
      errors),
  );
  return poller(async () => {
    const data = await getJSON(`/api/${scope}/${encodeURIComponent(name)}/activity${query({ window: windowValue })}`);
    const nowMs = parseTime(data.now);
    const options = { windowText: windowName, span };
    line.textContent = summary(data.totals, windowName);
    replaceChildren(cards, countCards(data.counts, scope, name));
    replaceChildren(held, heldList(data.held_by, what));
    const per = data.bucket_seconds === 60 ? "minute" : `${data.bucket_seconds / 60} minutes`;
    replaceChildren(charts,
      h("div", { class: "chart-grid" },
        chartBox(`Throughput: succeeded per ${per}`, key("key-ok", "succeeded"),
          barChart(data.buckets, [["succeeded", "bar-ok", "succeeded"]],
            { ...options, label: "succeeded", name: "Throughput" })),
        chartBox(`Failures per ${per}`, [key("key-retried", "failed, retried"), key("key-dead", "failed, dead")],
          barChart(data.buckets.map((b) => ({ ...b, retried: b.failed - b.dead })),
            [["dead", "bar-dead", "failed, dead"], ["retried", "bar-retried", "failed, retried"]],
            { ...options, label: "failed", name: "Failures" })),
        chartBox("Run time", [key("key-p50", "p50"), key("key-p95", "p95")],
          lineChart(data.buckets, [["p50_run_seconds", "l-p50", "p50"], ["p95_run_seconds", "l-p95", "p95"]],
            { ...options, name: "Run time" })),
        chartBox("Wait from due to start", [key("key-p95", "p95")],
          lineChart(data.buckets, [["p95_wait_seconds", "l-p95", "p95"]],
            { ...options, name: "Wait" }))));
    replaceChildren(errors, errorRows(data.errors, nowMs));
  }, 5000);
}
