// Overview: counts by state and queue, the throughput chart, oldest due job, workers alive,
// the read replica's lag (only when reads go to one), and a line on flow control (paused
// queues, limits in use).

import { getJSON } from "./api.js";
import { appendChildren, h, replaceChildren } from "./dom.js";
import { throughputChart } from "./chart.js";
import { absolute, badge, count, duration, limitTarget, rateText, relative, STATES } from "./format.js";
import { poller, presets } from "./ui.js";


// How full a limit is. A limit on every tenant caps each one; its use is summed over them all.
function usage(limit) {
  const each = limit.scope === "tenant" && limit.key === "*";
  const parts = [];
  if (limit.concurrency !== null) {
    parts.push(each
      ? `at most ${limit.concurrency} each, ${limit.running} running`
      : `${limit.running}/${limit.concurrency} running`);
  }
  if (limit.rate !== null) {
    parts.push(each
      ? `${rateText(limit)} each, ${limit.recent_starts} started`
      : `${limit.recent_starts} of ${rateText(limit)}`);
  }
  return parts.join(", ");
}

// One compact line: which queues are paused and how full each limit is; hidden when neither.
function flowLine(el, queueData, limitData) {
  const paused = queueData.queues.filter((queue) => queue.paused);
  const parts = [];
  if (paused.length) {
    parts.push(h("span", { class: "flow-part" }, "Paused: ",
      paused.map((queue) => h("a", { href: "#/queues", class: "flow-item", "data-paused-queue": queue.name }, badge("paused"), " ", queue.name))));
  }
  if (limitData.limits.length) {
    parts.push(h("span", { class: "flow-part" }, "Limits: ",
      limitData.limits.map((limit) => h("a", { href: "#/queues", class: "flow-item", "data-limit": `${limit.scope}:${limit.key}` },
        limitTarget(limit), " ",
        h("span", { class: "muted" }, usage(limit))))));
  }
  el.hidden = parts.length === 0;
  replaceChildren(el, parts);
  return new Set(paused.map((queue) => queue.name));
}

// The next runs of the active schedules, soonest first, one row per schedule (its next run,
// then the two after it): the soonest schedules are all the overview asks for.
const UPCOMING = 6;

function upcomingRuns(el, data) {
  const nowMs = Date.parse(data.now);
  const active = data.schedules
    .filter((schedule) => !schedule.paused && schedule.next_runs.length)
    .sort((a, b) => Date.parse(a.next_runs[0]) - Date.parse(b.next_runs[0]))
    .slice(0, UPCOMING);
  replaceChildren(el, active.length
    ? active.map((schedule) => {
      const [next, ...later] = schedule.next_runs;
      return h("tr", { "data-upcoming": schedule.name },
        h("td", {}, h("a", { href: "#/schedules" }, schedule.name)),
        h("td", {}, schedule.kind),
        h("td", { class: "muted" }, schedule.description),
        h("td", { class: "num", title: absolute(next) }, relative(next, nowMs)),
        h("td", { class: "muted" }, later.slice(0, 2).map((at) => relative(at, nowMs)).join(", ")));
    })
    : h("tr", {}, h("td", { class: "muted", colspan: 5 }, "No active schedules.")));
}

// How stale the counts and lists may be when they come from a read replica.
function replicaLag(replica) {
  if (!replica.replaying) return "not a replica";
  if (replica.lag_seconds === null) return "unknown";
  return replica.lag_seconds === 0 ? "caught up" : duration(replica.lag_seconds);
}

function card(label, value, extra) {
  return h("div", { class: "card" }, h("div", { class: "card-label" }, label), h("div", { class: "card-value" }, value), extra);
}

function lagCard(replica) {
  const el = card("replica lag", replicaLag(replica));
  el.dataset.replicaLag = "";
  el.title = "Counts, lists and job details come from a read replica: they may be this far behind.";
  return el;
}

export function renderOverview(root, config) {
  const cards = h("div", { class: "cards" });
  const chart = h("div", { class: "chart-box" });
  const queues = h("tbody");
  const flow = h("p", { class: "flow", hidden: true });
  const upcoming = h("tbody");
  let loop = null;
  appendChildren(root,
    h("h1", { text: "Overview" }),
    presets(config, () => loop && loop.refresh()),
    cards,
    flow,
    h("h2", { text: "Finished per minute" }),
    h("div", { class: "legend" },
      h("span", { class: "key key-ok" }), "succeeded ",
      h("span", { class: "key key-dead" }), "dead ",
      h("span", { class: "key key-cancelled" }), "cancelled"),
    chart,
    h("h2", { text: "Queues" }),
    h("table", { class: "grid" },
      h("thead", {}, h("tr", {}, h("th", { text: "queue" }), STATES.map((st) => h("th", { class: "num" }, badge(st))))),
      queues),
    h("h2", { text: "Upcoming schedule runs" }),
    h("table", { class: "grid" },
      h("thead", {}, h("tr", {}, ["schedule", "kind", "rule", "next run", "then"].map((t) => h("th", { text: t })))),
      upcoming),
  );
  loop = poller(async () => {
    const [stats, queueData, limitData, scheduleData] = await Promise.all([
      getJSON("/api/stats"), getJSON("/api/queues"), getJSON("/api/limits"),
      getJSON(`/api/schedules?order=due&limit=${UPCOMING}`),
    ]);
    upcomingRuns(upcoming, scheduleData);
    const paused = flowLine(flow, queueData, limitData);
    const exact = stats.counts.exact;
    replaceChildren(cards,
      STATES.map((st) => h("a", { class: "card-link", href: `#/jobs?state=${st}` },
        card(badge(st), count(stats.counts.by_state[st] || 0, exact)))),
      card("oldest due job", stats.oldest_due_age_seconds === null ? "none" : duration(stats.oldest_due_age_seconds)),
      h("a", { class: "card-link", href: "#/workers" }, card("workers alive", `${stats.workers_alive} / ${stats.workers_total}`)),
      stats.replica ? lagCard(stats.replica) : null,
    );
    replaceChildren(chart, throughputChart(stats.throughput.buckets));
    const rows = Object.entries(stats.counts.by_queue).map(([queue, perState]) => h("tr", {},
      h("td", {}, h("a", { href: `#/queues/${encodeURIComponent(queue)}` }, queue),
        paused.has(queue) ? [" ", badge("paused")] : null),
      STATES.map((st) => h("td", { class: "num" }, count(perState[st] || 0, exact)))));
    replaceChildren(queues, rows.length ? rows : h("tr", {}, h("td", { class: "muted", colspan: 6 }, "No jobs yet.")));
  });
  return loop;
}
