// Pieces every view uses: the notice line, live polling, the demo presets, the confirm dialog,
// the UTC / local time switch; and for the listing views, filters in the hash and keyset pages.

import { ApiError, postJSON, query } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { setTimeMode, timeMode } from "./format.js";

let noticeTimer = null;

export function notify(message, kind = "info") {
  const el = document.getElementById("notice");
  el.textContent = message;
  el.className = `notice ${kind}`;
  el.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => {
    el.hidden = true;
  }, kind === "error" ? 8000 : 4000);
}

export function reportError(error) {
  if (error instanceof ApiError && error.status === 401) {
    notify("Not signed in (or the session expired): reload the page to log in.", "error");
  } else {
    notify(error instanceof Error ? error.message : String(error), "error");
  }
}

export function setStatus(text, ok) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.className = ok ? "status ok" : "status bad";
}

// Calls `tick` now and then `intervalMs` after each call finished, until stopped. While paused,
// only `refresh()` calls it; a refresh during a call runs once more right after, so what an
// action changed is never hidden by a response that was already on its way.
export function poller(tick, intervalMs = 1500) {
  let stopped = false;
  let paused = false;
  let busy = false;
  let again = false;
  let timer = null;
  async function run() {
    if (stopped) return;
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    clearTimeout(timer);
    try {
      await tick();
      setStatus(paused ? "paused" : "live", true);
    } catch (error) {
      setStatus("disconnected", false);
      reportError(error);
    } finally {
      busy = false;
      if (again) {
        again = false;
        run();
      } else if (!stopped) {
        timer = setTimeout(loop, intervalMs);
      }
    }
  }
  function loop() {
    if (paused) timer = setTimeout(loop, intervalMs);
    else run();
  }
  run();
  return {
    refresh: run,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
    setPaused(value) {
      paused = value;
      setStatus(value ? "paused" : "live", true);
      if (!value) run();
    },
  };
}

// The filters named in `fields` from the hash's query, trimmed; empty ones are left out.
export function filterFrom(params, fields) {
  const filter = {};
  for (const field of fields) {
    const value = (params.get(field) || "").trim();
    if (value) filter[field] = value;
  }
  return filter;
}

// A filter form of a listing view: submitting it puts its `fields` into the hash of `page`
// (`#/jobs?kind=...`); submitting the same filters again refreshes in place.
export function submitsToHash(form, page, fields, refresh) {
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = {};
    for (const field of fields) next[field] = (data.get(field) || "").trim();
    const hash = `#/${page}${query(next)}`;
    if (location.hash === hash) refresh();
    else location.hash = hash;
  });
  return form;
}

// Keyset pages of a listing view and its live switch. `loop()` is the view's poller (made
// after this); `controls` go in the toolbar; each tick reads `cursor()` and ends with
// `show(next_cursor)`.
export function pager(loop) {
  const cursors = [null];
  const live = h("input", { type: "checkbox", checked: true });
  live.addEventListener("change", () => loop().setPaused(!live.checked));
  const newer = h("button", { type: "button", disabled: true }, "← newer");
  const older = h("button", { type: "button", disabled: true }, "older →");
  const pageLabel = h("span", { class: "muted" });
  newer.addEventListener("click", () => {
    if (cursors.length > 1) cursors.pop();
    loop().refresh();
  });
  older.addEventListener("click", () => {
    if (older.dataset.cursor) cursors.push(older.dataset.cursor);
    loop().refresh();
  });
  return {
    controls: [h("label", { class: "switch" }, live, " live"), newer, older, pageLabel],
    cursor: () => cursors[cursors.length - 1],
    show(nextCursor) {
      newer.disabled = cursors.length <= 1;
      older.disabled = !nextCursor;
      older.dataset.cursor = nextCursor || "";
      pageLabel.textContent = `page ${cursors.length}`;
    },
  };
}

// The seed's demo buttons; shown only when the server runs with demo on.
const PRESETS = [
  ["email", { kind: "email" }],
  ["email in 5 s", { kind: "email", delay_seconds: 5 }],
  ["flaky (60% fail)", { kind: "flaky", max_attempts: 4 }],
  ["slow (6 s)", { kind: "slow" }],
  ["crash worker", { kind: "crash" }],
  ["every 10 s", { kind: "email", every_seconds: 10 }],
];

export function presets(config, onDone) {
  if (!config.demo || config.read_only) return null;
  const buttons = PRESETS.map(([label, body]) =>
    h("button", {
      type: "button",
      class: "preset",
      on: {
        click: async () => {
          try {
            const created = await postJSON("/api/jobs", body);
            // every_seconds creates a schedule rather than a job.
            notify(body.every_seconds
              ? `Created schedule ${created.name} (${created.description}).`
              : `Enqueued job ${created.id} (${created.kind}).`);
            onDone();
          } catch (error) {
            reportError(error);
          }
        },
      },
    }, `+ ${label}`),
  );
  return h("div", { class: "presets" }, h("span", { class: "muted" }, "Demo: "), buttons);
}

// The header's switch between UTC and the browser's zone; `onChange` redraws the view.
export function timeToggle(onChange) {
  const label = () => (timeMode() === "local" ? "local time" : "UTC");
  const button = h("button", {
    type: "button",
    id: "time-mode",
    class: "link",
    title: "Show times in UTC or in this browser's time zone",
  }, label());
  button.addEventListener("click", () => {
    setTimeMode(timeMode() === "local" ? "utc" : "local");
    button.textContent = label();
    onChange();
  });
  return button;
}

// A modal asking to confirm `message`; `action` runs on confirm and returns the result text.
// Without an action it only informs. Navigating away (a link, the browser's Back) closes it:
// what it asked about belongs to the page that was left. `onClose` runs once it closed.
export function confirmDialog(title, message, confirmLabel, destructive, action, onClose) {
  const body = h("p", { class: "dialog-text" }, message);
  const confirm = h("button", { type: "button", class: destructive ? "danger" : "primary" }, confirmLabel);
  const cancel = h("button", { type: "button" }, action ? "Cancel" : "Close");
  const dialog = h("dialog", { class: "confirm" },
    h("h2", { text: title }), body, h("div", { class: "dialog-actions" }, cancel, action ? confirm : null));
  cancel.addEventListener("click", () => dialog.close());
  const leave = () => dialog.close();
  window.addEventListener("hashchange", leave);
  window.addEventListener("popstate", leave);
  dialog.addEventListener("close", () => {
    window.removeEventListener("hashchange", leave);
    window.removeEventListener("popstate", leave);
    dialog.remove();
    if (onClose) onClose();
  });
  confirm.addEventListener("click", async () => {
    confirm.disabled = true;
    try {
      const result = await action();
      replaceChildren(body, result);
    } catch (error) {
      replaceChildren(body, h("span", { class: "error-text" }, error.message));
    }
    confirm.remove();
    cancel.textContent = "Close";
  });
  document.body.append(dialog);
  dialog.showModal();
  return dialog;
}
