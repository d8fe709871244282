// Queues: pause and resume lanes, cluster-wide limits with their use (and a form to set one),
// and the jobs each tenant is running. Everything from the server goes in as text (dom.js).

import { getJSON, postJSON } from "./api.js";
import { appendChildren, h, replaceChildren } from "./dom.js";
import { badge, canAdminister, count, limitTarget, period, rateText, STATES } from "./format.js";
import { confirmDialog, notify, poller, reportError } from "./ui.js";

const PERIODS = [["second", 1], ["minute", 60], ["hour", 3600], ["day", 86400]];

function queueActions(queue, config, onDone) {
  if (config.read_only) return [];
  const verb = queue.paused ? "resume" : "pause";
  return h("button", {
    type: "button",
    class: "small",
    "data-action": verb,
    on: {
      click: async () => {
        try {
          await postJSON(`/api/queues/${encodeURIComponent(queue.name)}/${verb}`);
          notify(`Queue ${queue.name} ${verb === "pause" ? "paused: nothing new starts from it" : "resumed"}.`);
        } catch (error) {
          reportError(error);
        }
        onDone();
      },
    },
  }, verb);
}

function queueLimit(queue) {
  if (queue.concurrency === null) return h("span", { class: "muted" }, "—");
  return `${queue.limit_running} of ${queue.concurrency} running`;
}

function limitActions(limit, config, fill, onDone) {
  if (!canAdminister(config)) return [];
  const edit = h("button", {
    type: "button",
    class: "small",
    "data-action": "edit",
    on: { click: () => fill(limit) },
  }, "edit");
  const remove = h("button", {
    type: "button",
    class: "small danger",
    "data-action": "remove",
    on: {
      click: () => confirmDialog(
        "Remove limit",
        `Remove the limit on ${limitTarget(limit)}? Jobs it holds back become claimable at once.`,
        "Remove",
        true,
        async () => {
          const path = `/api/limits/${encodeURIComponent(limit.scope)}/${encodeURIComponent(limit.key)}/delete`;
          await postJSON(path);
          onDone();
          return `Removed the limit on ${limitTarget(limit)}.`;
        }),
    },
  }, "remove");
  return [edit, remove];
}

function field(label, control) {
  return h("label", { class: "field" }, h("span", { text: label }), control);
}

// The add-or-replace form, and `fill(limit)` that loads an existing limit into it for editing.
function limitForm(onDone) {
  const scope = h("select", { name: "scope" },
    ["kind", "queue", "tenant"].map((name) => h("option", { value: name }, name)));
  const key = h("input", { name: "key", required: true, autocomplete: "off", spellcheck: "false", placeholder: "pdf, or * for each tenant" });
  const concurrency = h("input", { name: "concurrency", type: "number", min: "0", step: "1", placeholder: "running at once" });
  const rate = h("input", { name: "rate", type: "number", min: "1", step: "1", placeholder: "starts" });
  const per = h("select", { name: "per" },
    PERIODS.map(([label, seconds]) => h("option", { value: String(seconds), selected: seconds === 60 }, label)));
  const form = h("form", { class: "filters limit-form" },
    field("scope", scope), field("key", key), field("concurrency", concurrency),
    field("rate", rate), field("per", per),
    h("button", { type: "submit", class: "primary" }, "Set limit"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { scope: scope.value, key: key.value.trim() };
    if (concurrency.value !== "") body.concurrency = Number(concurrency.value);
    if (rate.value !== "") {
      body.rate = Number(rate.value);
      body.period_seconds = Number(per.value);
    }
    try {
      const limit = await postJSON("/api/limits", body);
      notify(`Limit on ${limitTarget(limit)} set.`);
      key.value = "";
      concurrency.value = "";
      rate.value = "";
    } catch (error) {
      reportError(error);
    }
    onDone();
  });
  const fill = (limit) => {
    scope.value = limit.scope;
    key.value = limit.key;
    concurrency.value = limit.concurrency === null ? "" : String(limit.concurrency);
    rate.value = limit.rate === null ? "" : String(limit.rate);
    const known = PERIODS.some(([, seconds]) => seconds === limit.period_seconds);
    if (limit.period_seconds !== null && !known) {
      per.append(h("option", { value: String(limit.period_seconds) }, period(limit.period_seconds)));
    }
    if (limit.period_seconds !== null) per.value = String(limit.period_seconds);
    key.focus();
  };
  return { form, fill };
}

export function renderQueues(root, config) {
  const queues = h("tbody");
  const limits = h("tbody");
  const tenants = h("tbody");
  let loop = null;
  const refresh = () => loop && loop.refresh();
  const { form, fill } = limitForm(refresh);
  appendChildren(root,
    h("h1", { text: "Queues" }),
    h("table", { class: "grid queues" },
      h("thead", {}, h("tr", {},
        h("th", { text: "queue" }), h("th", { text: "state" }),
        STATES.map((st) => h("th", { class: "num" }, badge(st))),
        h("th", { text: "concurrency limit" }), h("th", {}))),
      queues),
    h("h2", { text: "Limits" }),
    h("p", { class: "muted hint" },
      "Cluster-wide: at most N running at once, at most N starts per period. A tenant limit on * applies to each tenant separately."),
    canAdminister(config) ? form : null,
    h("table", { class: "grid limits" },
      h("thead", {}, h("tr", {},
        ["scope", "key", "concurrency", "rate", "running", "recent starts", ""].map((t) =>
          h("th", { class: ["concurrency", "running", "recent starts"].includes(t) ? "num" : null, text: t })))),
      limits),
    h("h2", { text: "Running per tenant" }),
    h("table", { class: "grid tenants" },
      h("thead", {}, h("tr", {}, h("th", { text: "tenant" }), h("th", { class: "num" }, "running"))),
      tenants),
  );
  loop = poller(async () => {
    const [queueData, limitData, tenantData] = await Promise.all([
      getJSON("/api/queues"), getJSON("/api/limits"), getJSON("/api/tenants/running"),
    ]);
    const exact = queueData.exact;
    const queueRows = queueData.queues.map((queue) => h("tr", { "data-queue": queue.name },
      h("td", { class: "mono" }, h("a", { href: `#/queues/${encodeURIComponent(queue.name)}` }, queue.name),
        " ", h("a", { class: "muted small-link", href: `#/jobs?queue=${encodeURIComponent(queue.name)}` }, "jobs")),
      h("td", {}, badge(queue.paused ? "paused" : "active")),
      STATES.map((st) => h("td", { class: "num" }, count(queue.counts[st] || 0, exact))),
      h("td", {}, queueLimit(queue)),
      h("td", { class: "row-actions" }, queueActions(queue, config, refresh))));
    replaceChildren(queues, queueRows.length ? queueRows
      : h("tr", {}, h("td", { class: "muted", colspan: 9 }, "No queues yet: a queue appears with its first job.")));
    const limitRows = limitData.limits.map((limit) => h("tr", { "data-limit": `${limit.scope}:${limit.key}` },
      h("td", {}, limit.scope),
      h("td", { class: "mono" }, limit.key),
      h("td", { class: "num" }, limit.concurrency === null ? "" : String(limit.concurrency)),
      h("td", {}, rateText(limit)),
      h("td", { class: "num" }, String(limit.running)),
      h("td", { class: "num" }, limit.rate === null ? "" : String(limit.recent_starts)),
      h("td", { class: "row-actions" }, limitActions(limit, config, fill, refresh))));
    replaceChildren(limits, limitRows.length ? limitRows
      : h("tr", {}, h("td", { class: "muted", colspan: 7 }, "No limits: every job may start as soon as a worker is free.")));
    const tenantRows = tenantData.tenants.map((tenant) => h("tr", { "data-tenant": tenant.tenant },
      h("td", { class: "mono" }, h("a", { href: `#/jobs?state=running&tenant=${encodeURIComponent(tenant.tenant)}` }, tenant.tenant)),
      h("td", { class: "num" }, String(tenant.running))));
    replaceChildren(tenants, tenantRows.length ? tenantRows
      : h("tr", {}, h("td", { class: "muted", colspan: 2 }, "No tenant has jobs running.")));
  });
  return loop;
}
