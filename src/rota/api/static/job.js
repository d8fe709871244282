// Job detail: fields, progress, why it is not running, payload and result as text, a timeline,
// every attempt with its error and traceback, a durable job's steps (and what it sleeps until
// or waits for), and the operator verbs: run a delayed job now, re-run a succeeded one, delete
// one.

import { ApiError, apiHref, deleteJSON, getJSON, postJSON } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { absolute, badge, canAdminister, duration, parseTime, plural, progressBar, relative, stateNote } from "./format.js";
import { actionButtons, blockedLabel } from "./jobs.js";
import { heartbeatsText, timelineChart } from "./timeline.js";
import { confirmDialog, notify, poller, reportError } from "./ui.js";

function field(label, value) {
  return [h("dt", { text: label }), h("dd", {}, value === null || value === undefined || value === "" ? "—" : value)];
}

function at(iso, now) {
  if (!iso) return null;
  return h("span", { title: absolute(iso) }, `${relative(iso, now)} `, h("span", { class: "muted" }, `(${absolute(iso)})`));
}

// Attempts given back (their number is used again by the next one).
const GIVEN_BACK = ["snoozed", "released", "slept", "waited"];
// Attempts after which a lower or equal number means an operator retried or re-ran the job.
const COUNTED = ["failed", "succeeded", "cancelled"];

// Every execution numbered once, in order (#1, #2, ...), with the attempt it counted as and
// whether it began a new series: a retry or a re-run sets the attempt counter back, so the
// attempt numbers alone repeat.
function numbered(attempts) {
  let previous = null;
  return attempts.map((a, i) => {
    const restarted = previous !== null && (a.attempt < previous.attempt
      || (a.attempt === previous.attempt && COUNTED.includes(previous.outcome)));
    const after = restarted ? (previous.outcome === "succeeded" ? "re-run" : "retried") : null;
    previous = a;
    return { ...a, run: i + 1, after };
  });
}

function timeline(job, now) {
  const events = [[job.created_at, "created"]];
  for (const a of numbered(job.attempts)) {
    const note = a.after ? `, ${a.after}` : "";
    events.push([a.started_at, `#${a.run} started on ${a.worker || "?"} (attempt ${a.attempt}${note}, token ${a.token})`]);
    if (a.last_heartbeat_at) events.push([a.last_heartbeat_at, `#${a.run}: last of ${plural(a.heartbeats, "heartbeat")}`]);
    if (a.lease_until) events.push([a.lease_until, `#${a.run}: its lease ran out`]);
    if (a.finished_at) events.push([a.finished_at, `#${a.run}: ${a.outcome}`]);
  }
  if (job.finished_at) events.push([job.finished_at, job.state]);
  else if (job.state === "waiting") events.push([job.created_at, `waiting on ${plural(job.waiting_on, "parent job")}`]);
  else if (job.state === "pending") events.push([job.run_at, parseTime(job.run_at) > now ? "due" : "due (waiting for a worker)"]);
  events.sort((a, b) => parseTime(a[0]) - parseTime(b[0]));
  return h("ol", { class: "timeline" }, events.map(([when, what]) =>
    h("li", {}, h("span", { class: "when" }, absolute(when)), " ",
      h("span", { class: "muted" }, `(${relative(when, now)})`), " ", what)));
}

// How many parents and children the job page lists (the rest: "and more").
const RELATED_SHOWN = 50;

// A payload or result: whole and indented, or, when the API cut it (over 64 KiB), its first
// part as sent and a link to the whole value.
function jsonValue(job, name) {
  if (!job[`${name}_truncated`]) return h("pre", { class: name }, JSON.stringify(job[name], null, 2));
  return [
    h("pre", { class: `${name} cut` }, `${job[`${name}_preview`]} …`),
    h("p", { class: "muted" }, `Only the first part is shown. `,
      h("a", { href: apiHref(`/api/jobs/${job.id}/${name}`), target: "_blank", rel: "noopener" }, `Open the whole ${name}`)),
  ];
}

function jobLink(jobId) {
  return h("a", { class: "mono", href: `#/jobs/${jobId}` }, String(jobId));
}

// The job's place in its workflow: its parents and children (the first page of each, from
// their paged routes), each a link with its state.
function workflowSection(job, workflow) {
  if (!workflow) return null;
  const linked = (page) => (page.jobs.length
    ? [...page.jobs.map((j) => h("span", { class: "wf-link" }, jobLink(j.id), " ", badge(j.state))),
      page.next_cursor ? h("span", { class: "muted" }, " and more") : null]
    : "—");
  const { summary, parents, children } = workflow;
  const done = ["succeeded", "dead", "cancelled"].reduce((n, st) => n + (summary.by_state[st] || 0), 0);
  return [
    h("h2", { text: "Workflow" }),
    h("dl", { class: "fields workflow" },
      field("workflow", [
        h("a", { class: "mono", href: `#/workflows/${summary.id}` }, String(summary.id)),
        `: ${done} of ${plural(summary.total, "job")} finished`,
      ]),
      field("waiting on", job.state === "waiting" ? plural(job.waiting_on, "parent job") : null),
      field("parents", linked(parents)),
      field("children", linked(children))),
  ];
}

function attemptsTable(job, nowMs) {
  if (!job.attempts.length) return h("p", { class: "muted" }, "No attempts yet.");
  return h("table", { class: "grid attempts" },
    h("thead", {}, h("tr", {}, ["#", "attempt", "token", "worker", "started", "took", "heartbeats", "outcome", "error"].map((t) => h("th", { text: t })))),
    h("tbody", {}, numbered(job.attempts).flatMap((a) => {
      const took = a.finished_at ? (parseTime(a.finished_at) - parseTime(a.started_at)) / 1000 : null;
      const counted = GIVEN_BACK.includes(a.outcome) ? `${a.attempt} (given back)` : String(a.attempt);
      const row = h("tr", { "data-run": String(a.run) },
        h("td", { class: "num" }, String(a.run)),
        h("td", { class: "num" }, counted),
        h("td", { class: "mono" }, String(a.token)),
        h("td", { class: "mono" }, a.worker || ""),
        h("td", {}, absolute(a.started_at)),
        h("td", {}, took === null ? "running" : duration(took)),
        h("td", { class: "beats" }, heartbeatsText(a, nowMs)),
        h("td", {}, badge(a.outcome)),
        h("td", { class: "attempt-error" },
          a.error ? h("pre", { class: "error-text" }, a.error) : "",
          a.traceback ? h("details", {}, h("summary", {}, "traceback"), h("pre", { class: "trace" }, a.traceback)) : ""));
      if (!a.after) return [row];
      const text = a.after === "re-run" ? "re-run: a new series of attempts" : "retried: attempts counted afresh";
      return [h("tr", { class: "series" }, h("td", { colspan: "9", class: "muted" }, text)), row];
    })));
}

// A durable job's steps, sleeps and waits, in the order they began.
function stepsTable(job, nowMs) {
  if (!job.steps || !job.steps.length) return null;
  const rows = job.steps.map((s, i) => {
    const took = s.kind === "step" && s.duration_seconds !== null ? duration(s.duration_seconds) : "";
    const when = s.wake_at ? [s.kind === "sleep" ? "until " : "deadline ", at(s.wake_at, nowMs)] : "";
    const value = s.result_preview === null ? "" : `${s.result_preview}${s.result_truncated ? " …" : ""}`;
    return h("tr", { "data-step": s.name },
      h("td", { class: "num" }, String(i + 1)),
      h("td", { class: "mono" }, s.name),
      h("td", {}, s.kind === "wait" && s.key ? ["wait for ", h("span", { class: "mono" }, s.key)] : s.kind),
      h("td", {}, badge(s.state)),
      h("td", { class: "num" }, s.kind === "step" ? String(s.attempts) : ""),
      h("td", {}, took || when),
      h("td", { class: "step-result" },
        value ? h("pre", { class: "result" }, value) : "",
        s.error ? h("pre", { class: "error-text" }, s.error) : ""));
  });
  return [
    h("h2", { text: "Steps" }),
    h("table", { class: "grid steps" },
      h("thead", {}, h("tr", {}, ["#", "name", "kind", "state", "attempts", "took / when", "result or error"].map((t) => h("th", { text: t })))),
      h("tbody", {}, rows)),
  ];
}

// What a sleeping or waiting durable job is suspended on, or null.
function suspendedText(job, nowMs) {
  const s = job.suspended;
  if (!s) return null;
  const until = s.until ? [" until ", at(s.until, nowMs)] : "";
  if (s.kind === "sleep") return ["sleeping", until, ` (${s.step})`];
  return ["waiting for signal ", h("span", { class: "mono" }, s.key || "?"), until, ` (${s.step})`];
}

// Why a crash suspect is watched. The server says its lease expired while it ran; whether its
// worker died is only known here: a worker still alive hung or lost the store (a long pause,
// a cut connection), and another worker took the job over.
function quarantineLine(job, workers) {
  if (!job.quarantine) return null;
  const expired = job.attempts.filter((a) => a.outcome === "lease_expired");
  const last = expired[expired.length - 1];
  const holder = last && last.worker ? workers.find((w) => w.name === last.worker) : null;
  if (!holder || !holder.alive) return h("p", { class: "error-text quarantine" }, job.quarantine);
  const after = job.attempts[job.attempts.indexOf(last) + 1];
  const taken = after && after.worker
    ? `taken over by ${after.worker}`
    : "pending again, for any worker to take over";
  const mark = job.quarantine.indexOf(", so ");
  const rest = mark >= 0 ? `; ${job.quarantine.slice(mark + 2)}` : "";
  const times = expired.length === 1 ? "" : ` (${expired.length} times)`;
  return h("p", { class: "warn-text quarantine" },
    `lease expired while its worker ${holder.name} was alive${times} (it hung or lost the store; it did not crash): ${taken}${rest}`);
}

// Why a waiting or pending job is not running, from the server's blocked_by.
function whySection(job, nowMs) {
  if (!["pending", "waiting", "held"].includes(job.state)) return null;
  const items = job.blocked_by.map((b) => h("li", { "data-blocker": b.reason },
    h("span", { class: `blocker b-${b.reason}` }, blockedLabel(b)), " ",
    b.message,
    b.reason === "not_due" ? h("span", { class: "muted" }, ` (due ${relative(job.run_at, nowMs)}, ${absolute(job.run_at)})`) : null));
  if (!items.length) {
    items.push(h("li", { "data-blocker": "none" },
      "Due, and nothing holds it back: it starts when a worker has a free slot (higher priority first)."));
  }
  return [h("h2", { text: "Why it is not running" }), h("ul", { class: "why" }, items)];
}

// A job's last error: red while it is the reason the job failed; once the job succeeded (after
// a retry), only the history of an earlier attempt.
function lastError(job) {
  if (!job.last_error) return null;
  if (job.state === "succeeded") {
    return h("details", { class: "earlier-error" },
      h("summary", {}, "an earlier attempt failed (the job succeeded since)"),
      h("pre", { class: "muted" }, job.last_error));
  }
  return [h("h2", { text: "Last error" }), h("pre", { class: "error-text last-error" }, job.last_error)];
}

// Buttons for the verbs only the job page offers; a running job has none (cancel it first).
function operatorButtons(job, config, nowMs, onDone) {
  if (config.read_only) return [];
  const post = (verb, body, done) => async () => {
    try {
      await postJSON(`/api/jobs/${job.id}/${verb}`, body);
      notify(`Job ${job.id}: ${done}.`);
    } catch (error) {
      reportError(error);
    }
    onDone();
  };
  const buttons = [h("a", { class: "button-link small", href: `#/jobs/new?copy=${job.id}`, "data-action": "copy" }, "enqueue a copy")];
  if (job.state === "pending" && parseTime(job.run_at) > nowMs) {
    buttons.push(h("button", { type: "button", class: "small", "data-action": "run-now",
      on: { click: post("reschedule", { run_at: "now" }, "due now") } }, "run now"));
  }
  if (job.state === "waiting" || job.state === "pending") {
    buttons.push(h("button", { type: "button", class: "small", "data-action": "hold",
      title: "No worker claims a held job until it is released",
      on: { click: post("hold", undefined, "held: no worker claims it until it is released") } }, "hold"));
  }
  if (job.state === "succeeded") {
    buttons.push(h("button", { type: "button", class: "small", "data-action": "rerun",
      on: { click: post("rerun", undefined, "pending again") } }, "re-run"));
  }
  if (job.state !== "running" && canAdminister(config)) {
    let deleted = false;
    const remove = () => confirmDialog("Delete job", `Delete job ${job.id} (${job.state}) and its history? This cannot be undone.`,
      "Delete it", true, async () => {
        await deleteJSON(`/api/jobs/${job.id}`);
        deleted = true;
        return `Deleted job ${job.id}.`;
      }, () => {
        if (deleted) location.hash = "#/jobs"; // the page of a job that is gone has nothing left to show
      });
    buttons.push(h("button", { type: "button", class: "small danger", "data-action": "delete", on: { click: remove } }, "delete"));
  }
  return buttons;
}

export function renderJob(root, config, id) {
  const head = h("div", { class: "job-head" });
  const body = h("div");
  root.append(h("a", { class: "back", href: "#/jobs" }, "← jobs"), head, body);
  let loop = null;
  // Keep open <details> open across refreshes.
  let openTraces = new Set();
  loop = poller(async () => {
    let job;
    try {
      job = await getJSON(`/api/jobs/${id}`);
    } catch (error) {
      if (error instanceof ApiError && (error.status === 404 || error.status === 400)) {
        replaceChildren(head, h("h1", { text: `Job ${id}` }));
        replaceChildren(body, h("p", { class: "error-text" }, error.message));
        return;
      }
      throw error;
    }
    const nowMs = parseTime(job.now);
    let workflow = null;
    if (job.workflow !== null && job.workflow !== undefined) {
      try {
        const [summary, parents, children] = await Promise.all([
          getJSON(`/api/workflows/${job.workflow}?limit=1`),
          getJSON(`/api/jobs/${job.id}/parents?limit=${RELATED_SHOWN}`),
          getJSON(`/api/jobs/${job.id}/children?limit=${RELATED_SHOWN}`),
        ]);
        workflow = { summary, parents, children };
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
      }
    }
    let workers = [];
    if (job.quarantine) {
      try {
        workers = (await getJSON("/api/workers")).workers;
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
      }
    }
    openTraces = new Set([...body.querySelectorAll("details")].map((d, i) => (d.open ? i : -1)).filter((i) => i >= 0));
    replaceChildren(head,
      h("h1", {}, `Job `, h("span", { class: "mono" }, String(job.id)), " ",
        badge(job.state), " ", job.suspended ? h("span", { class: "state-note muted" }, suspendedText(job, nowMs)) : stateNote(job, nowMs)),
      h("div", { class: "actions" }, actionButtons(job, config, () => loop.refresh()),
        operatorButtons(job, config, nowMs, () => loop.refresh())));
    replaceChildren(body,
      h("dl", { class: "fields" },
        field("kind", h("a", { href: `#/kinds/${encodeURIComponent(job.kind)}`, class: "mono" }, job.kind)),
        field("queue", h("a", { href: `#/queues/${encodeURIComponent(job.queue)}`, class: "mono" }, job.queue)),
        field("state", job.state === "waiting" ? `waiting on ${job.waiting_on}` : job.state),
        job.suspended ? field("suspended", suspendedText(job, nowMs)) : null,
        field("progress", progressBar(job, { finished: true })),
        field("attempt", job.attempts.length > job.attempt
          ? `${job.attempt} of ${job.max_attempts} (${job.attempts.length} runs in all)`
          : `${job.attempt} of ${job.max_attempts}`),
        field("priority", String(job.priority)),
        field("tenant", job.tenant),
        field("unique key", job.unique_key),
        field("run at", at(job.run_at, nowMs)),
        field("created", at(job.created_at, nowMs)),
        field("started", at(job.started_at, nowMs)),
        field("finished", at(job.finished_at, nowMs)),
        field("worker", job.worker),
        field("lease until", at(job.lease_until, nowMs)),
        field("lease token", job.lease_token === null ? null : String(job.lease_token)),
        field("schedule", job.schedule),
        field("slot", job.slot_at ? absolute(job.slot_at) : null),
        field("timeout", job.timeout_seconds === null ? null : duration(job.timeout_seconds)),
        field("expires", at(job.expires_at, nowMs)),
        field("crashes", job.crashes ? String(job.crashes) : null)),
      quarantineLine(job, workers),
      workflowSection(job, workflow),
      whySection(job, nowMs),
      lastError(job),
      h("h2", { text: "Payload" }),
      jsonValue(job, "payload"),
      job.result_truncated || (job.result !== null && job.result !== undefined)
        ? [h("h2", { text: "Result" }), jsonValue(job, "result")]
        : null,
      stepsTable(job, nowMs),
      h("h2", { text: "Timeline" }),
      timelineChart(job, numbered(job.attempts), nowMs),
      job.attempts.length ? h("p", { class: "muted hint" },
        "To scale: each run from its start to its end, a thin mark at its last heartbeat and, for a worker that went silent, a red one where its lease ran out; dashed, the wait before a worker took the job over, or a running job's lease ahead of it; below, a durable job's steps. Hover for times.") : null,
      timeline(job, nowMs),
      h("h2", { text: "Attempts" }),
      attemptsTable(job, nowMs));
    body.querySelectorAll("details").forEach((d, i) => {
      if (openTraces.has(i)) d.open = true;
    });
  });
  return loop;
}
