// Workers: who is registered, their heartbeat age and running jobs, and who is alive.

import { getJSON } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { badge, duration, parseTime, relative } from "./format.js";
import { poller } from "./ui.js";

export function renderWorkers(root) {
  const body = h("tbody");
  const empty = h("p", { class: "muted", hidden: true }, "No workers registered.");
  root.append(
    h("h1", { text: "Workers" }),
    h("table", { class: "grid" },
      h("thead", {}, h("tr", {}, ["name", "host", "pid", "queues", "concurrency", "running", "started", "heartbeat", "status"].map((t) => h("th", { text: t })))),
      body),
    empty,
  );
  return poller(async () => {
    const data = await getJSON("/api/workers");
    const now = parseTime(data.now);
    empty.hidden = data.workers.length > 0;
    replaceChildren(body, data.workers.map((w) => h("tr", {},
      h("td", { class: "mono" }, w.name),
      h("td", {}, w.host),
      h("td", { class: "mono" }, String(w.pid)),
      h("td", {}, w.queues.join(", ")),
      h("td", { class: "num" }, String(w.concurrency)),
      h("td", { class: "num" }, String(w.running)),
      h("td", {}, relative(w.started_at, now)),
      h("td", {}, w.heartbeat_age_seconds === null ? "never" : `${duration(w.heartbeat_age_seconds)} ago`),
      h("td", {}, badge(w.alive ? "alive" : "silent")),
    )));
  });
}
