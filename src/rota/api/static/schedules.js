// Schedules: a placeholder until the schedule API exists.

import { h } from "./dom.js";

export function renderSchedules(root) {
  root.append(
    h("h1", { text: "Schedules" }),
    h("p", { class: "muted" },
      "Schedules (cron and interval rules, their next runs, pause and run-now) appear here."),
  );
  return null;
}
