// A new job from a form: the kinds the server accepts, a JSON payload checked as it is typed,
// queue, priority, tenant, attempts, run time and unique key. "Enqueue a copy" of a job opens
// the form filled in from it, to edit before sending. The server records who enqueued it.

import { ApiError, getJSON, postJSON } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { timeMode } from "./format.js";
import { notify } from "./ui.js";

function field(label, control, hint) {
  return h("label", { class: "field" }, h("span", { text: label }), control,
    hint ? h("span", { class: "muted" }, hint) : null);
}

function text(name, placeholder) {
  return h("input", { name, autocomplete: "off", spellcheck: "false", placeholder: placeholder || "" });
}

function number(name, placeholder, min) {
  return h("input", { name, type: "number", step: "1", min, placeholder: placeholder || "" });
}

// The payload's text as JSON: { value } when it parses (empty text: no payload), else { error }.
export function readPayload(raw) {
  if (!raw.trim()) return { value: undefined };
  try {
    return { value: JSON.parse(raw) };
  } catch (error) {
    return { error: error.message };
  }
}

// The run time typed in the dashboard's time mode (UTC or this browser's zone), as ISO 8601
// UTC; "" for now.
function runAt(value) {
  if (!value) return "";
  const at = timeMode() === "local" ? new Date(value) : new Date(`${value}Z`);
  if (Number.isNaN(at.getTime())) throw new Error("run at: is not a date and time");
  return at.toISOString();
}

function kindControl(config) {
  if (!Array.isArray(config.kinds)) return text("kind", "email");
  return h("select", { name: "kind", required: true },
    config.kinds.map((kind) => h("option", { value: kind }, kind)));
}

export function renderEnqueue(root, config, params) {
  const copyOf = /^\d+$/.test(params.get("copy") || "") ? params.get("copy") : null;
  root.append(h("a", { class: "back", href: copyOf ? `#/jobs/${copyOf}` : "#/jobs" }, copyOf ? `← job ${copyOf}` : "← jobs"),
    h("h1", { text: copyOf ? `Enqueue a copy of job ${copyOf}` : "New job" }));
  if (config.read_only) {
    root.append(h("p", { class: "muted read-only-note" }, "This identity is read-only: it cannot enqueue jobs."));
    return null;
  }
  const inputs = {
    kind: kindControl(config),
    queue: text("queue", "the kind's default"),
    priority: number("priority", "0"),
    tenant: text("tenant"),
    max_attempts: number("max_attempts", "the kind's default", "1"),
    run_at: h("input", { name: "run_at", type: "datetime-local", step: "1" }),
    unique_key: text("unique_key"),
    payload: h("textarea", { name: "payload", rows: "8", spellcheck: "false", placeholder: "{}", "aria-describedby": "payload-check" }),
  };
  const check = h("p", { id: "payload-check", class: "payload-check muted", "aria-live": "polite" }, "No payload (null).");
  const error = h("p", { class: "error-text form-error", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, "Enqueue");
  const form = h("form", { class: "enqueue-form" },
    h("div", { class: "filters" },
      field("kind", inputs.kind), field("queue", inputs.queue), field("priority", inputs.priority),
      field("tenant", inputs.tenant), field("max attempts", inputs.max_attempts)),
    h("div", { class: "filters" },
      field(`run at (${timeMode() === "local" ? "local time" : "UTC"})`, inputs.run_at, "empty: now"),
      field("unique key", inputs.unique_key)),
    h("div", { class: "filters payload-field" }, field("payload (JSON)", inputs.payload)),
    check,
    error,
    h("div", { class: "dialog-actions" }, submit));
  root.append(form);

  // Checked at every keystroke: the form cannot be sent with a payload that is not JSON.
  const validate = () => {
    const parsed = readPayload(inputs.payload.value);
    const bad = parsed.error !== undefined;
    inputs.payload.setAttribute("aria-invalid", bad ? "true" : "false");
    check.className = bad ? "payload-check error-text" : "payload-check muted";
    check.textContent = bad ? `Not valid JSON: ${parsed.error}` : (parsed.value === undefined ? "No payload (null)." : "Valid JSON.");
    submit.disabled = bad;
    return parsed;
  };
  inputs.payload.addEventListener("input", validate);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const parsed = validate();
    if (parsed.error !== undefined) return;
    const body = { kind: inputs.kind.value.trim() };
    if (parsed.value !== undefined) body.payload = parsed.value;
    for (const name of ["queue", "tenant", "unique_key"]) {
      if (inputs[name].value.trim()) body[name] = inputs[name].value.trim();
    }
    for (const name of ["priority", "max_attempts"]) {
      if (inputs[name].value !== "") body[name] = Number(inputs[name].value);
    }
    submit.disabled = true;
    try {
      const when = runAt(inputs.run_at.value);
      if (when) body.run_at = when;
      const created = await postJSON("/api/jobs", body);
      notify(created.duplicate
        ? `Job ${created.id} already holds that unique key: nothing new was enqueued.`
        : `Enqueued job ${created.id} (${created.kind}).`);
      location.hash = `#/jobs/${created.id}`;
    } catch (failure) {
      replaceChildren(error, failure.message);
      error.hidden = false;
      submit.disabled = false;
    }
  });

  if (copyOf) {
    // The copy starts from the job as it is; every field stays editable.
    getJSON(`/api/jobs/${copyOf}`).then((job) => {
      inputs.kind.value = job.kind;
      inputs.queue.value = job.queue;
      inputs.priority.value = String(job.priority);
      inputs.tenant.value = job.tenant || "";
      inputs.max_attempts.value = String(job.max_attempts);
      inputs.unique_key.value = job.unique_key || "";
      inputs.payload.value = job.payload === null ? "" : JSON.stringify(job.payload, null, 2);
      validate();
    }).catch((failure) => {
      replaceChildren(error, failure instanceof ApiError ? `job ${copyOf}: ${failure.message}` : String(failure));
      error.hidden = false;
    });
  }
  inputs.kind.focus();
  return null;
}
