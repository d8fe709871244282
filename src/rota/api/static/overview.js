// Overview: counts by state and queue, the throughput chart, oldest due job, workers alive.

import { getJSON } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { throughputChart } from "./chart.js";
import { badge, count, duration } from "./format.js";
import { poller, presets } from "./ui.js";

const STATES = ["pending", "running", "succeeded", "dead", "cancelled"];

function card(label, value, extra) {
  return h("div", { class: "card" }, h("div", { class: "card-label" }, label), h("div", { class: "card-value" }, value), extra);
}

export function renderOverview(root, config) {
  const cards = h("div", { class: "cards" });
  const chart = h("div", { class: "chart-box" });
  const queues = h("tbody");
  let loop = null;
  root.append(
    h("h1", { text: "Overview" }),
    presets(config, () => loop && loop.refresh()),
    cards,
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
  );
  loop = poller(async () => {
    const stats = await getJSON("/api/stats");
    const exact = stats.counts.exact;
    replaceChildren(cards,
      STATES.map((st) => h("a", { class: "card-link", href: `#/jobs?state=${st}` },
        card(badge(st), count(stats.counts.by_state[st] || 0, exact)))),
      card("oldest due job", stats.oldest_due_age_seconds === null ? "none" : duration(stats.oldest_due_age_seconds)),
      h("a", { class: "card-link", href: "#/workers" }, card("workers alive", `${stats.workers_alive} / ${stats.workers_total}`)),
    );
    replaceChildren(chart, throughputChart(stats.throughput.buckets));
    const rows = Object.entries(stats.counts.by_queue).map(([queue, perState]) => h("tr", {},
      h("td", {}, h("a", { href: `#/jobs?queue=${encodeURIComponent(queue)}` }, queue)),
      STATES.map((st) => h("td", { class: "num" }, count(perState[st] || 0, exact)))));
    replaceChildren(queues, rows.length ? rows : h("tr", {}, h("td", { class: "muted", colspan: 6 }, "No jobs yet.")));
  });
  return loop;
}
