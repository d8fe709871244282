// Schedules: each rule with its next runs and its last run's outcome; add, edit, pause, resume,
// run now and remove, and a schedule's recent jobs under its row.
// Everything from the server goes in as text (dom.js), never as markup.

import { getJSON, postJSON, query } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { absolute, badge, canAdminister, parseTime, relative, stateCell } from "./format.js";
import { confirmDialog, notify, poller, reportError } from "./ui.js";

const PATH = (name) => `/api/schedules/${encodeURIComponent(name)}`;
// How many of a schedule's jobs its row shows when opened.
const RECENT = 10;

// What a resume does with the runs a pause missed (rota.domain.schedule_state.Missed).
const MISSED = {
  queue: "queued (on resume they run as its missed-runs policy allows)",
  drop: "dropped (on resume only the runs after it happen)",
};

// Pausing asks what the resume does with the runs that fall due meanwhile.
function pauseDialog(schedule, onDone) {
  const choices = h("span", { class: "choices" }, Object.entries(MISSED).map(([value, text]) =>
    h("label", { class: "choice" },
      h("input", { type: "radio", name: "missed", value, checked: value === "queue" }), ` ${text}`)));
  confirmDialog("Pause schedule",
    [`Pause ${schedule.name}? The runs that fall due while it is paused are: `, choices],
    "Pause it", false, async () => {
      const missed = choices.querySelector("input:checked").value;
      await postJSON(`${PATH(schedule.name)}/pause${query({ missed })}`);
      onDone();
      return `Schedule ${schedule.name} paused; the runs it misses will be ${MISSED[missed]}.`;
    });
}

function actions(schedule, config, edit, onDone) {
  if (config.read_only) return [];
  const act = (verb, done) => async () => {
    try {
      const result = await postJSON(`${PATH(schedule.name)}/${verb}`);
      notify(done(result));
    } catch (error) {
      reportError(error);
    }
    onDone();
  };
  const toggle = schedule.paused
    ? h("button", { type: "button", class: "small", "data-action": "resume", on: { click: act("resume", () => `Schedule ${schedule.name} resumed.`) } }, "resume")
    : h("button", { type: "button", class: "small", "data-action": "pause", on: { click: () => pauseDialog(schedule, onDone) } }, "pause");
  const runNow = h("button", {
    type: "button",
    class: "small",
    "data-action": "run",
    on: { click: act("run", (job) => `Schedule ${schedule.name}: job ${job.id} enqueued.`) },
  }, "run now");
  const editButton = h("button", { type: "button", class: "small", "data-action": "edit", on: { click: () => edit(schedule) } }, "edit");
  const remove = h("button", {
    type: "button",
    class: "small danger",
    "data-action": "remove",
    on: {
      click: () => confirmDialog("Remove schedule",
        `Remove schedule ${schedule.name} (${schedule.description})? It runs no more; the jobs it already enqueued stay.`,
        "Remove it", true, async () => {
          await postJSON(`${PATH(schedule.name)}/delete`);
          onDone();
          return `Removed schedule ${schedule.name}.`;
        }),
    },
  }, "remove");
  return canAdminister(config) ? [toggle, runNow, editButton, remove] : [toggle, runNow];
}

function nextRuns(schedule, nowMs) {
  if (schedule.paused) {
    return h("span", { class: "muted", "data-missed": schedule.missed },
      `paused; missed runs will be ${schedule.missed === "drop" ? "dropped" : "queued"}`);
  }
  const [next, ...later] = schedule.next_runs;
  if (!next) return h("span", { class: "muted" }, "none");
  return h("div", { class: "next-runs" },
    h("span", { title: absolute(schedule.due_at) }, relative(schedule.due_at, nowMs)),
    " ",
    h("span", { class: "muted" }, `(${absolute(next)})`),
    later.length
      ? h("ul", { class: "later muted" }, later.slice(0, 3).map((at) => h("li", {}, absolute(at))))
      : null);
}

function lastRun(schedule, nowMs) {
  if (schedule.last_job_id === null) return h("span", { class: "muted" }, "never");
  const when = schedule.last_run_at ? relative(schedule.last_run_at, nowMs) : "run now";
  return h("a", { href: `#/jobs/${schedule.last_job_id}`, title: `job ${schedule.last_job_id}` }, when);
}

function field(label, control, hint) {
  return h("label", { class: "field" }, h("span", { text: label }), control, hint ? h("span", { class: "muted" }, hint) : null);
}

function text(name, placeholder) {
  return h("input", { name, autocomplete: "off", spellcheck: "false", placeholder: placeholder || "" });
}

function number(name, placeholder, min) {
  return h("input", { name, type: "number", step: "any", min, placeholder: placeholder || "" });
}

// The add-or-edit form. `open(schedule)` loads a schedule for editing (its name fixed), and
// `open(null)` starts a new one. Every field left empty takes its default on the server.
function scheduleForm(onDone) {
  const inputs = {
    name: text("name", "nightly-report"),
    kind: text("kind", "report"),
    cron: text("cron", "30 2 * * *  or  @daily"),
    timezone: text("timezone", "UTC"),
    every_seconds: number("every_seconds", "seconds", "1"),
    payload: h("textarea", { name: "payload", rows: "3", spellcheck: "false", placeholder: "{}" }),
    queue: text("queue", "default"),
    priority: number("priority", "0"),
    tenant: text("tenant"),
    max_attempts: number("max_attempts", "kind's default", "1"),
    jitter_seconds: number("jitter_seconds", "0", "0"),
    misfire: h("select", { name: "misfire" }, ["latest", "skip", "all"].map((m) => h("option", { value: m }, m))),
    overlap: h("select", { name: "overlap" }, ["skip", "allow"].map((m) => h("option", { value: m }, m))),
  };
  const ruleKind = h("select", { name: "rule" },
    h("option", { value: "cron" }, "cron"), h("option", { value: "every" }, "every N seconds"));
  const cronFields = h("span", { class: "rule-fields" }, field("cron", inputs.cron), field("time zone", inputs.timezone));
  const everyFields = h("span", { class: "rule-fields", hidden: true }, field("every (s)", inputs.every_seconds));
  const showRule = () => {
    cronFields.hidden = ruleKind.value !== "cron";
    everyFields.hidden = ruleKind.value !== "every";
  };
  ruleKind.addEventListener("change", showRule);
  const title = h("h2", { text: "New schedule" });
  const error = h("p", { class: "error-text form-error", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, "Create");
  const cancel = h("button", { type: "button" }, "Cancel");
  const form = h("form", { class: "schedule-form", hidden: true },
    title,
    h("div", { class: "filters" },
      field("name", inputs.name), field("kind", inputs.kind), field("rule", ruleKind), cronFields, everyFields),
    h("div", { class: "filters" },
      field("queue", inputs.queue), field("priority", inputs.priority), field("tenant", inputs.tenant),
      field("max attempts", inputs.max_attempts), field("jitter (s)", inputs.jitter_seconds),
      field("missed runs", inputs.misfire), field("overlap", inputs.overlap)),
    h("div", { class: "filters" }, field("payload (JSON)", inputs.payload)),
    h("p", { class: "muted hint" },
      "A schedule defined in code (app.schedule) takes its code's definition again when a worker starts; a pause is kept."),
    error,
    h("div", { class: "dialog-actions" }, cancel, submit));
  let editing = null;

  const close = () => {
    form.hidden = true;
    editing = null;
  };
  cancel.addEventListener("click", close);

  function open(schedule) {
    editing = schedule ? schedule.name : null;
    error.hidden = true;
    title.textContent = schedule ? `Edit schedule ${schedule.name}` : "New schedule";
    submit.textContent = schedule ? "Save" : "Create";
    inputs.name.disabled = Boolean(schedule);
    const value = (v) => (v === null || v === undefined ? "" : String(v));
    const s = schedule || {};
    inputs.name.value = value(s.name);
    inputs.kind.value = value(s.kind);
    ruleKind.value = schedule && schedule.every_seconds !== null ? "every" : "cron";
    inputs.cron.value = value(s.cron);
    inputs.timezone.value = schedule && schedule.cron !== null ? value(s.timezone) : "";
    inputs.every_seconds.value = value(s.every_seconds);
    inputs.payload.value = schedule ? JSON.stringify(s.payload) : "";
    inputs.queue.value = value(s.queue);
    inputs.priority.value = value(s.priority);
    inputs.tenant.value = value(s.tenant);
    inputs.max_attempts.value = value(s.max_attempts);
    inputs.jitter_seconds.value = schedule ? value(s.jitter_seconds) : "";
    inputs.misfire.value = s.misfire || "latest";
    inputs.overlap.value = s.overlap || "skip";
    showRule();
    form.hidden = false;
    (schedule ? inputs.kind : inputs.name).focus();
  }

  // The request body from the form; throws with a message naming the field it cannot read.
  function body() {
    const out = { kind: inputs.kind.value.trim() };
    if (!editing) out.name = inputs.name.value.trim();
    if (ruleKind.value === "cron") {
      out.cron = inputs.cron.value.trim();
      if (inputs.timezone.value.trim()) out.timezone = inputs.timezone.value.trim();
    } else {
      if (inputs.every_seconds.value === "") throw new Error("every_seconds: give the interval in seconds");
      out.every_seconds = Number(inputs.every_seconds.value);
    }
    for (const name of ["queue", "tenant"]) {
      if (inputs[name].value.trim()) out[name] = inputs[name].value.trim();
    }
    for (const name of ["priority", "max_attempts", "jitter_seconds"]) {
      if (inputs[name].value !== "") out[name] = Number(inputs[name].value);
    }
    const payload = inputs.payload.value.trim();
    if (payload) {
      try {
        out.payload = JSON.parse(payload);
      } catch {
        throw new Error("payload: is not valid JSON");
      }
    }
    out.misfire = inputs.misfire.value;
    out.overlap = inputs.overlap.value;
    return out;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const name = editing;
    try {
      const sent = body();
      const saved = name ? await postJSON(`${PATH(name)}/edit`, sent) : await postJSON("/api/schedules", sent);
      notify(name ? `Schedule ${saved.name} saved.` : `Schedule ${saved.name} created (${saved.description}).`);
      close();
      onDone();
    } catch (failure) {
      // The server names every problem of the kind and the rule at once, "; " between them.
      replaceChildren(error, failure.message.split("; ").map((problem) => h("span", { class: "problem" }, problem)));
      error.hidden = false;
    }
  });
  return { form, open };
}

// A schedule's most recent jobs, newest first, for the row opened under it.
function recentJobs(schedule, data) {
  const nowMs = parseTime(data.now);
  if (!data.jobs.length) return h("p", { class: "muted" }, "No jobs from this schedule yet (or they were pruned).");
  return h("table", { class: "grid recent" },
    h("thead", {}, h("tr", {}, ["job", "state", "slot", "attempt", "finished"].map((t) => h("th", { text: t })))),
    h("tbody", {}, data.jobs.map((job) => h("tr", { "data-job": String(job.id) },
      h("td", { class: "mono" }, h("a", { href: `#/jobs/${job.id}` }, String(job.id))),
      h("td", {}, stateCell(job, nowMs)),
      h("td", {}, job.slot_at ? absolute(job.slot_at) : ""),
      h("td", { class: "num" }, `${job.attempt}/${job.max_attempts}`),
      h("td", { class: "when" }, job.finished_at ? relative(job.finished_at, nowMs) : "")))));
}

// Schedules come a page at a time (by name, keyset cursors), so a poll stays small however
// many schedules there are.
const PAGE_SIZE = 50;

export function renderSchedules(root, config) {
  const body = h("tbody");
  const empty = h("p", { class: "muted", hidden: true },
    "No schedules yet. Add one here, define them in code with app.schedule(...), or with `rota schedules add`.");
  const cursors = [null];
  const previous = h("button", { type: "button", disabled: true, "data-page": "previous" }, "← previous");
  const next = h("button", { type: "button", disabled: true, "data-page": "next" }, "next →");
  const pageLabel = h("span", { class: "muted" });
  // Names of the schedules whose recent jobs are shown.
  const opened = new Set();
  let loop = null;
  const refresh = () => loop && loop.refresh();
  const { form, open } = scheduleForm(refresh);
  const add = !canAdminister(config) ? null
    : h("button", { type: "button", class: "primary", "data-action": "add", on: { click: () => open(null) } }, "+ New schedule");
  previous.addEventListener("click", () => {
    if (cursors.length > 1) cursors.pop();
    loop.refresh();
  });
  next.addEventListener("click", () => {
    if (next.dataset.cursor) cursors.push(next.dataset.cursor);
    loop.refresh();
  });
  root.append(
    h("h1", { text: "Schedules" }),
    h("div", { class: "toolbar" }, previous, next, pageLabel, add ? h("span", { class: "bulk" }, add) : null),
    canAdminister(config) ? form : "",
    h("table", { class: "grid schedules" },
      h("thead", {}, h("tr", {}, ["name", "kind", "rule", "next run", "last run", "last outcome", "state", ""].map((t) => h("th", { text: t })))),
      body),
    empty,
  );

  function toggleJobs(name) {
    if (opened.has(name)) opened.delete(name);
    else opened.add(name);
    refresh();
  }

  loop = poller(async () => {
    const cursor = cursors[cursors.length - 1];
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (cursor) params.set("cursor", cursor);
    const data = await getJSON(`/api/schedules?${params}`);
    const nowMs = parseTime(data.now);
    const shown = data.schedules.filter((schedule) => opened.has(schedule.name));
    const recent = new Map(await Promise.all(shown.map(async (schedule) =>
      [schedule.name, await getJSON(`/api/jobs${query({ schedule: schedule.name, limit: RECENT })}`)])));
    empty.hidden = data.schedules.length > 0 || cursors.length > 1;
    previous.disabled = cursors.length <= 1;
    next.disabled = !data.next_cursor;
    next.dataset.cursor = data.next_cursor || "";
    pageLabel.textContent = `page ${cursors.length}`;
    replaceChildren(body, data.schedules.map((schedule) => {
      const isOpen = recent.has(schedule.name);
      const row = h("tr", { "data-schedule": schedule.name },
        h("td", { class: "mono" },
          h("button", {
            type: "button",
            class: "link disclose",
            "data-action": "jobs",
            "aria-expanded": isOpen ? "true" : "false",
            title: "recent jobs",
            on: { click: () => toggleJobs(schedule.name) },
          }, isOpen ? "▾ " : "▸ ", schedule.name)),
        h("td", {}, schedule.kind),
        h("td", {}, schedule.description),
        h("td", {}, nextRuns(schedule, nowMs)),
        h("td", { class: "when" }, lastRun(schedule, nowMs)),
        h("td", {}, schedule.last_outcome ? badge(schedule.last_outcome) : h("span", { class: "muted" }, "—")),
        h("td", {}, badge(schedule.paused ? "paused" : "active")),
        h("td", { class: "row-actions" }, actions(schedule, config, open, refresh)));
      if (!isOpen) return row;
      return [row, h("tr", { class: "schedule-jobs", "data-jobs-of": schedule.name },
        h("td", { colspan: "8" }, recentJobs(schedule, recent.get(schedule.name))))];
    }));
  });
  return loop;
}
