// A workflow drawn as a graph in SVG: one box per job, coloured by its state and repainted
// live; edges solid when a failed parent cancels the child, dashed when the child runs anyway;
// big sibling groups collapsed into one box with a count. Pan by dragging, the arrow keys or
// the buttons; zoom with the wheel, + and −, or the buttons. A click (or Enter) on a job
// selects it: the panel beside the graph opens its page and retries or cancels it, alone or
// with every job that runs after it. A double click opens the job's page.

import { postJSON } from "./api.js";
import { h, s, replaceChildren } from "./dom.js";
import { badge, count, plural } from "./format.js";
import { confirmDialog } from "./ui.js";
import { BOX, downstreamOf, initiallyCollapsed, layout, signature, structure } from "./graphlayout.js";

const FINISHED = ["succeeded", "dead", "cancelled"];
const FAILED = ["dead", "cancelled"];
// The state a collapsed group is coloured by: the first of these any of its jobs is in.
const GROUP_COLOUR = ["dead", "running", "pending", "waiting", "cancelled", "succeeded"];
const MIN_SCALE = 0.05;
const MAX_SCALE = 3;
const PAN_STEP = 60;
const POLICY_TEXT = { cancel: "cancelled if it fails", run: "runs anyway if it fails" };

function clip(text, size) {
  return text.length > size ? `${text.slice(0, size - 1)}…` : text;
}

function countStates(ids, byId) {
  const counts = {};
  for (const id of ids) {
    const state = byId.get(id).state;
    counts[state] = (counts[state] || 0) + 1;
  }
  return counts;
}

function countsText(counts) {
  return Object.entries(counts).map(([state, n]) => `${n} ${state}`).join(", ");
}

function edgePath(from, to) {
  const x1 = from.x + BOX.width;
  const y1 = from.y + BOX.height / 2;
  const x2 = to.x;
  const y2 = to.y + BOX.height / 2;
  const bend = Math.max(30, (x2 - x1) / 2);
  return `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`;
}

export function workflowGraph(config, workflowId, refresh) {
  let graph = null;
  let shape = null;
  let drawnSignature = null;
  let collapsed = null;
  let drawing = null;
  let selected = null;
  const byId = new Map();
  const elements = new Map(); // box key -> its <g>
  const view = { x: 20, y: 20, k: 1 };
  let fitted = false;

  const viewport = s("g", { class: "viewport" });
  const svg = s("svg", { class: "graph", role: "group", "aria-label": "The workflow's jobs and the edges between them" },
    s("defs", {},
      s("marker", { id: "wf-arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
        s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow" }))),
    viewport);
  const frame = h("div", {
    class: "graph-frame",
    tabindex: "0",
    role: "region",
    "aria-label": "Workflow graph: arrow keys pan, + and − zoom, 0 fits it in view; Tab reaches each job",
  }, svg);
  const panel = h("aside", { class: "graph-panel", "aria-live": "polite" });
  const note = h("p", { class: "muted graph-note" });
  const expandAll = h("button", { type: "button", on: { click: () => setCollapsed(new Set()) } }, "Expand all");
  const collapseAll = h("button", {
    type: "button",
    on: { click: () => setCollapsed(new Set(shape ? shape.groups.keys() : [])) },
  }, "Collapse groups");
  const tools = h("div", { class: "toolbar graph-tools", role: "toolbar", "aria-label": "Graph view" },
    h("button", { type: "button", "aria-label": "Zoom in", on: { click: () => zoomBy(1.25) } }, "+"),
    h("button", { type: "button", "aria-label": "Zoom out", on: { click: () => zoomBy(0.8) } }, "−"),
    h("button", { type: "button", on: { click: () => fit() } }, "Fit"),
    h("button", { type: "button", on: { click: () => setView(20, 20, 1) } }, "Actual size"),
    collapseAll, expandAll,
    h("span", { class: "graph-legend" },
      s("svg", { class: "legend-line", width: "34", height: "10", "aria-hidden": "true" },
        s("line", { x1: "2", y1: "5", x2: "32", y2: "5", class: "edge policy-cancel" })),
      " cancelled if a parent fails ",
      s("svg", { class: "legend-line", width: "34", height: "10", "aria-hidden": "true" },
        s("line", { x1: "2", y1: "5", x2: "32", y2: "5", class: "edge policy-run" })),
      " runs anyway"));
  const root = h("div", { class: "workflow-graph" }, tools, note, h("div", { class: "graph-body" }, frame, panel));

  function setView(x, y, k) {
    view.x = x;
    view.y = y;
    view.k = Math.min(MAX_SCALE, Math.max(MIN_SCALE, k));
    viewport.setAttribute("transform", `translate(${view.x.toFixed(1)},${view.y.toFixed(1)}) scale(${view.k.toFixed(4)})`);
    frame.dataset.scale = view.k.toFixed(4);
  }

  function zoomBy(factor, cx, cy) {
    const rect = svg.getBoundingClientRect();
    const px = cx === undefined ? rect.width / 2 : cx;
    const py = cy === undefined ? rect.height / 2 : cy;
    const k = Math.min(MAX_SCALE, Math.max(MIN_SCALE, view.k * factor));
    setView(px - ((px - view.x) * k) / view.k, py - ((py - view.y) * k) / view.k, k);
  }

  function fit() {
    if (!drawing) return;
    const rect = svg.getBoundingClientRect();
    const width = rect.width || 800;
    const height = rect.height || 500;
    const k = Math.min(1.2, (width - 40) / drawing.width, (height - 40) / drawing.height);
    const scale = Math.min(MAX_SCALE, Math.max(MIN_SCALE, k));
    setView((width - drawing.width * scale) / 2, (height - drawing.height * scale) / 2, scale);
  }

  // Keep a box that gets the keyboard's focus inside the view.
  function reveal(box) {
    const rect = svg.getBoundingClientRect();
    const left = view.x + box.x * view.k;
    const top = view.y + box.y * view.k;
    const right = left + BOX.width * view.k;
    const bottom = top + BOX.height * view.k;
    let { x, y } = view;
    if (left < 0) x -= left - 20;
    else if (right > rect.width) x -= right - rect.width + 20;
    if (top < 0) y -= top - 20;
    else if (bottom > rect.height) y -= bottom - rect.height + 20;
    if (x !== view.x || y !== view.y) setView(x, y, view.k);
  }

  function setCollapsed(keys) {
    collapsed = keys;
    draw();
  }

  // --------------------------------------------------------------- panning with the pointer

  let drag = null;
  let dragged = false;
  svg.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    drag = { x: event.clientX, y: event.clientY, vx: view.x, vy: view.y, id: event.pointerId };
    dragged = false;
  });
  svg.addEventListener("pointermove", (event) => {
    if (!drag || event.pointerId !== drag.id) return;
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (!dragged && Math.abs(dx) + Math.abs(dy) < 4) return;
    if (!dragged) svg.setPointerCapture(drag.id);
    dragged = true;
    frame.classList.add("panning");
    setView(drag.vx + dx, drag.vy + dy, view.k);
  });
  const endDrag = () => {
    drag = null;
    frame.classList.remove("panning");
  };
  svg.addEventListener("pointerup", endDrag);
  svg.addEventListener("pointercancel", endDrag);
  // A drag that ends over a box is not a click on it.
  svg.addEventListener("click", (event) => {
    if (dragged) {
      event.stopPropagation();
      dragged = false;
    }
  }, true);
  svg.addEventListener("wheel", (event) => {
    event.preventDefault();
    const rect = svg.getBoundingClientRect();
    zoomBy(event.deltaY < 0 ? 1.15 : 1 / 1.15, event.clientX - rect.left, event.clientY - rect.top);
  });
  frame.addEventListener("keydown", (event) => {
    const moves = { ArrowLeft: [PAN_STEP, 0], ArrowRight: [-PAN_STEP, 0], ArrowUp: [0, PAN_STEP], ArrowDown: [0, -PAN_STEP] };
    if (moves[event.key]) {
      setView(view.x + moves[event.key][0], view.y + moves[event.key][1], view.k);
    } else if (event.key === "+" || event.key === "=") {
      zoomBy(1.25);
    } else if (event.key === "-" || event.key === "_") {
      zoomBy(0.8);
    } else if (event.key === "0") {
      fit();
    } else {
      return;
    }
    event.preventDefault();
  });

  // --------------------------------------------------------------- boxes

  function paintJob(el, node) {
    el.setAttribute("class", `node job s-${node.state}${selected === node.id ? " selected" : ""}`);
    el.setAttribute("aria-label", `job ${node.id}, ${node.kind}: ${node.state}`);
    el.querySelector(".node-state").textContent = node.state === "waiting" && node.waiting_on
      ? `#${node.id} · waiting on ${node.waiting_on}` : `#${node.id} · ${node.state}`;
  }

  function paintGroup(el, box) {
    const counts = countStates(box.ids, byId);
    const colour = GROUP_COLOUR.find((state) => counts[state]) || "pending";
    el.setAttribute("class", `node group s-${colour}`);
    const kinds = [...new Set(box.ids.map((id) => byId.get(id).kind))];
    const what = kinds.length === 1 ? kinds[0] : plural(kinds.length, "kind");
    el.setAttribute("aria-label", `${box.ids.length} jobs (${what}) collapsed: ${countsText(counts)}. Enter expands them`);
    el.querySelector(".node-state").textContent = `${countsText(counts)}`;
    const bar = el.querySelector(".group-bar");
    replaceChildren(bar);
    let x = 0;
    for (const state of GROUP_COLOUR) {
      if (!counts[state]) continue;
      const width = ((BOX.width - 16) * counts[state]) / box.ids.length;
      bar.append(s("rect", { x: (8 + x).toFixed(1), y: String(BOX.height - 7), width: width.toFixed(1), height: "4", class: `bar s-${state}` }));
      x += width;
    }
  }

  function jobBox(box) {
    const node = byId.get(box.ids[0]);
    const el = s("g", {
      transform: `translate(${box.x},${box.y})`,
      tabindex: "0",
      role: "button",
      "data-job": String(node.id),
      on: {
        click: () => select(node.id),
        dblclick: () => {
          location.hash = `#/jobs/${node.id}`;
        },
        keydown: (event) => {
          if (event.key === "Enter" || event.key === " ") {
            event.preventDefault();
            select(node.id);
          }
        },
        focus: () => reveal(box),
      },
    },
    s("title", {}, `job ${node.id} (${node.kind})`),
    s("rect", { class: "node-box", width: String(BOX.width), height: String(BOX.height), rx: "6" }),
    s("text", { class: "node-kind", x: "10", y: "18" }, clip(node.kind, 20)),
    s("text", { class: "node-state", x: "10", y: "34" }));
    paintJob(el, node);
    return el;
  }

  function groupBox(box) {
    const expand = () => {
      const next = new Set(collapsed);
      next.delete(box.group);
      setCollapsed(next);
      const first = elements.get(`n${box.ids[0]}`);
      if (first) first.focus();
    };
    const el = s("g", {
      transform: `translate(${box.x},${box.y})`,
      tabindex: "0",
      role: "button",
      "data-group": box.group,
      "data-count": String(box.ids.length),
      on: {
        click: expand,
        keydown: (event) => {
          if (event.key === "Enter" || event.key === " ") {
            event.preventDefault();
            expand();
          }
        },
        focus: () => reveal(box),
      },
    },
    s("title", {}, `${box.ids.length} jobs, collapsed: click to expand`),
    s("rect", { class: "node-box stacked", x: "5", y: "-5", width: String(BOX.width), height: String(BOX.height), rx: "6" }),
    s("rect", { class: "node-box", width: String(BOX.width), height: String(BOX.height), rx: "6" }),
    s("text", { class: "node-kind", x: "10", y: "18" }, `${box.ids.length} × ${clip(byId.get(box.ids[0]).kind, 14)}`),
    s("text", { class: "node-state", x: "10", y: "32" }),
    s("g", { class: "group-bar" }));
    paintGroup(el, box);
    return el;
  }

  function draw() {
    drawing = layout(shape, graph.nodes, collapsed);
    const where = new Map(drawing.boxes.map((box) => [box.key, box]));
    const focused = document.activeElement;
    const focusKey = focused && focused.dataset ? (focused.dataset.job ? `n${focused.dataset.job}` : null) : null;
    elements.clear();
    const edges = drawing.links.map((link) => s("path", {
      class: `edge policy-${link.policy}`,
      d: edgePath(where.get(link.from), where.get(link.to)),
      "marker-end": "url(#wf-arrow)",
      "data-policy": link.policy,
    }, s("title", {}, `${link.count > 1 ? `${link.count} edges: ` : ""}the child is ${POLICY_TEXT[link.policy]}`)));
    const boxes = drawing.boxes.map((box) => {
      const el = box.group ? groupBox(box) : jobBox(box);
      elements.set(box.key, el);
      return el;
    });
    replaceChildren(viewport, s("g", { class: "edges" }, edges), s("g", { class: "nodes" }, boxes));
    frame.dataset.boxes = String(boxes.length);
    markDownstream();
    if (focusKey && elements.has(focusKey)) elements.get(focusKey).focus({ preventScroll: true });
  }

  function repaint() {
    for (const box of drawing.boxes) {
      const el = elements.get(box.key);
      if (box.group) paintGroup(el, box);
      else paintJob(el, byId.get(box.ids[0]));
    }
    markDownstream();
  }

  function markDownstream() {
    const after = selected !== null && byId.has(selected) ? downstreamOf(shape, selected) : new Set();
    for (const [key, el] of elements) {
      if (key[0] === "n") el.classList.toggle("downstream", after.has(Number(key.slice(1))));
    }
  }

  // --------------------------------------------------------------- the selected job's panel

  function act(verb, downstream) {
    const node = byId.get(selected);
    const scope = downstream ? `job ${node.id} and every job that runs after it` : `job ${node.id}`;
    const title = `${verb === "retry" ? "Retry" : "Cancel"} ${downstream ? "downstream" : "job"}`;
    confirmDialog(title, `${verb === "retry" ? "Retry" : "Cancel"} ${scope}?`,
      verb === "retry" ? "Retry" : "Cancel them", verb === "cancel", async () => {
        const result = await postJSON(
          `/api/workflows/${workflowId}/nodes/${node.id}/${verb}${downstream ? "?downstream=true" : ""}`);
        refresh();
        return `${plural(result.count, "job")} ${verb === "retry" ? "retried" : "cancelled"}.`;
      });
  }

  let panelShows = null;
  function showPanel() {
    const node = selected === null ? null : byId.get(selected);
    if (!node) {
      if (panelShows === "") return;
      panelShows = "";
      replaceChildren(panel,
        h("p", { class: "muted" }, "Select a job (click it, or Tab to it and press Enter) to open it, retry it or cancel it, alone or with every job that runs after it."));
      return;
    }
    const after = downstreamOf(shape, node.id);
    const failedAfter = [...after].some((id) => FAILED.includes(byId.get(id).state));
    const activeAfter = [...after].some((id) => !FINISHED.includes(byId.get(id).state));
    const failed = FAILED.includes(node.state);
    const active = !FINISHED.includes(node.state);
    const shows = [node.id, node.state, node.waiting_on, after.size, failedAfter, activeAfter].join("|");
    if (shows === panelShows) return;
    panelShows = shows;
    const button = (label, verb, downstream, enabled, danger) => h("button", {
      type: "button",
      class: danger ? "danger" : null,
      disabled: !enabled,
      on: { click: () => act(verb, downstream) },
    }, label);
    replaceChildren(panel,
      h("h2", {}, "Job ", h("span", { class: "mono" }, String(node.id))),
      h("p", {}, h("span", { class: "mono" }, node.kind), " ", badge(node.state)),
      node.state === "waiting" ? h("p", { class: "muted" }, `waiting on ${plural(node.waiting_on, "parent")}`) : null,
      h("p", { class: "muted" }, `${plural(after.size, "job")} shown run after it`),
      h("p", {}, h("a", { href: `#/jobs/${node.id}`, class: "open-job" }, `Open job ${node.id} →`)),
      config.read_only ? null : h("div", { class: "graph-actions" },
        button("Retry", "retry", false, failed, false),
        button("Retry with what follows", "retry", true, failed || failedAfter, false),
        button("Cancel", "cancel", false, active, true),
        button("Cancel with what follows", "cancel", true, active || activeAfter, true)));
  }

  function select(id) {
    selected = id;
    repaint();
    showPanel();
  }

  // --------------------------------------------------------------- each poll

  function update(next) {
    graph = next;
    byId.clear();
    for (const node of graph.nodes) byId.set(node.id, node);
    const sign = signature(graph);
    if (sign !== drawnSignature) {
      shape = structure(graph);
      if (collapsed === null) collapsed = initiallyCollapsed(shape);
      else collapsed = new Set([...collapsed].filter((key) => shape.groups.has(key)));
      drawnSignature = sign;
      draw();
      if (!fitted) {
        fitted = true;
        requestAnimationFrame(() => {
          const rect = svg.getBoundingClientRect();
          if (drawing.width + 40 > rect.width || drawing.height + 40 > rect.height) fit();
        });
      }
    } else {
      repaint();
    }
    const hidden = graph.total - graph.shown;
    replaceChildren(note,
      hidden > 0 ? `Showing the first ${count(graph.shown)} of ${plural(graph.total, "job")} (by id); the table lists them all. ` : "",
      graph.edges_truncated ? "Some edges into jobs with more than 1,000 parents are not drawn. " : "",
      collapsed.size ? `${plural(collapsed.size, "group")} of sibling jobs collapsed: click one (or Tab to it and press Enter) to expand it.` : "");
    expandAll.disabled = collapsed.size === 0;
    collapseAll.disabled = collapsed.size === shape.groups.size;
    showPanel();
  }

  setView(20, 20, 1);
  showPanel();
  return { element: root, update };
}
