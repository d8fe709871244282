// The dashboard: hash routes to views, each with its own live refresh, stopped on navigation.

import { getJSON } from "./api.js";
import { replaceChildren, h } from "./dom.js";
import { reportError, timeToggle } from "./ui.js";
import { renderOverview } from "./overview.js";
import { renderJobs } from "./jobs.js";
import { renderJob } from "./job.js";
import { renderEnqueue } from "./enqueue.js";
import { renderWorkflow } from "./workflow.js";
import { renderWorkers } from "./workers.js";
import { renderSchedules } from "./schedules.js";
import { renderQueues } from "./queues.js";
import { renderAudit } from "./audit.js";
import { renderActivity } from "./activity.js";

let current = null;
let config = { demo: false, read_only: false, kinds: null, login: false, identity: "" };

function route() {
  const hash = location.hash || "#/";
  const [path, search] = hash.slice(1).split("?");
  const params = new URLSearchParams(search || "");
  if (path === "/jobs/new") return { view: "jobs", render: (root) => renderEnqueue(root, config, params) };
  const jobMatch = /^\/jobs\/(\d+)$/.exec(path);
  if (jobMatch) return { view: "jobs", render: (root) => renderJob(root, config, jobMatch[1]) };
  const workflowMatch = /^\/workflows\/(\d+)$/.exec(path);
  if (workflowMatch) return { view: "jobs", render: (root) => renderWorkflow(root, config, workflowMatch[1], params) };
  const pageMatch = /^\/(queues|kinds)\/([^/]+)$/.exec(path);
  if (pageMatch) {
    let name = pageMatch[2];
    try {
      name = decodeURIComponent(name);
    } catch {
      // A malformed escape: the name goes to the server as it is, which refuses it (400).
    }
    return { view: "queues", render: (root) => renderActivity(root, pageMatch[1], name, params) };
  }
  if (path === "/jobs") return { view: "jobs", render: (root) => renderJobs(root, config, params) };
  if (path === "/workers") return { view: "workers", render: (root) => renderWorkers(root, config) };
  if (path === "/queues") return { view: "queues", render: (root) => renderQueues(root, config) };
  if (path === "/schedules") return { view: "schedules", render: (root) => renderSchedules(root, config) };
  if (path === "/audit") return { view: "audit", render: (root) => renderAudit(root, config, params) };
  return { view: "overview", render: (root) => renderOverview(root, config) };
}

function show() {
  if (current && current.stop) current.stop();
  const root = document.getElementById("view");
  replaceChildren(root);
  const { view, render } = route();
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.view === view);
  }
  try {
    current = render(root);
  } catch (error) {
    reportError(error);
    replaceChildren(root, h("p", { class: "error-text" }, String(error)));
  }
}

async function start() {
  try {
    config = await getJSON("/api/config");
  } catch (error) {
    reportError(error);
  }
  document.getElementById("mode").hidden = !config.read_only;
  document.getElementById("logout").hidden = !config.login;
  document.getElementById("status").after(timeToggle(() => current && current.refresh && current.refresh()));
  window.addEventListener("hashchange", show);
  show();
}

start();
