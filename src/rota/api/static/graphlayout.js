// A workflow's graph laid out in layers, left to right, without the DOM: each job's layer is
// the longest path to it from a job without parents; siblings (jobs of one layer with the same
// parents) form a group that may be collapsed into one box; within a layer, boxes are ordered
// by a few sweeps of the barycentre heuristic (the mean position of their neighbours in the
// layer before, then after), which keeps most edges short and uncrossed.

export const BOX = { width: 168, height: 44 };
const LAYER_GAP = 84;
const ROW_GAP = 14;
const SWEEPS = 4;
// A group of siblings this big or bigger is collapsed until someone expands it.
export const AUTO_COLLAPSE = 25;
// A group needs at least this many jobs to be collapsible at all.
export const MIN_GROUP = 3;

// The layer of each job: 0 without parents among `nodes`, else one more than its deepest
// parent. Kahn's order, so it does not rely on ids growing along edges.
function layers(nodes, parentsOf, childrenOf) {
  const layer = new Map();
  const pending = new Map(nodes.map((node) => [node.id, (parentsOf.get(node.id) || []).length]));
  const ready = nodes.filter((node) => pending.get(node.id) === 0).map((node) => node.id);
  for (const id of ready) layer.set(id, 0);
  while (ready.length) {
    const id = ready.pop();
    for (const child of childrenOf.get(id) || []) {
      layer.set(child, Math.max(layer.get(child) || 0, layer.get(id) + 1));
      pending.set(child, pending.get(child) - 1);
      if (pending.get(child) === 0) ready.push(child);
    }
  }
  for (const node of nodes) if (!layer.has(node.id)) layer.set(node.id, 0);
  return layer;
}

// The graph's structure: which edges join shown jobs, each job's layer and sibling group.
export function structure(graph) {
  const shown = new Set(graph.nodes.map((node) => node.id));
  const edges = graph.edges.filter((edge) => shown.has(edge.parent) && shown.has(edge.child));
  const parentsOf = new Map();
  const childrenOf = new Map();
  for (const edge of edges) {
    if (!parentsOf.has(edge.child)) parentsOf.set(edge.child, []);
    parentsOf.get(edge.child).push(edge.parent);
    if (!childrenOf.has(edge.parent)) childrenOf.set(edge.parent, []);
    childrenOf.get(edge.parent).push(edge.child);
  }
  const layer = layers(graph.nodes, parentsOf, childrenOf);
  const members = new Map();
  const groupOf = new Map();
  for (const node of graph.nodes) {
    const parents = [...(parentsOf.get(node.id) || [])].sort((a, b) => a - b);
    const key = `${layer.get(node.id)}:${parents.join(",")}`;
    if (!members.has(key)) members.set(key, []);
    members.get(key).push(node.id);
    groupOf.set(node.id, key);
  }
  const groups = new Map();
  for (const [key, ids] of members) {
    if (ids.length >= MIN_GROUP) groups.set(key, ids);
  }
  return { edges, parentsOf, childrenOf, layer, groups, groupOf };
}

// A signature of what the layout depends on: the shown jobs and edges (not their states).
export function signature(graph) {
  const ids = graph.nodes.map((node) => node.id).join(",");
  const edges = graph.edges.map((edge) => `${edge.parent}>${edge.child}${edge.on_parent_failure[0]}`).join(",");
  return `${ids}|${edges}`;
}

// Every job that runs after `id` (directly or not), `id` left out.
export function downstreamOf(shape, id) {
  const seen = new Set();
  const todo = [id];
  while (todo.length) {
    for (const child of shape.childrenOf.get(todo.pop()) || []) {
      if (!seen.has(child)) {
        seen.add(child);
        todo.push(child);
      }
    }
  }
  return seen;
}

// Where each box goes. `collapsed` holds the keys of collapsed groups. Returns the boxes
// ({key, x, y, ids, group}: one job, or a collapsed group of them), the edges between boxes
// ({from, to, policy}, one per pair and policy), and the drawing's width and height.
export function layout(shape, nodes, collapsed) {
  const boxOf = new Map();
  const boxes = new Map();
  for (const node of nodes) {
    const group = shape.groupOf.get(node.id);
    const key = shape.groups.has(group) && collapsed.has(group) ? `g${group}` : `n${node.id}`;
    boxOf.set(node.id, key);
    if (!boxes.has(key)) {
      boxes.set(key, { key, group: key[0] === "g" ? group : null, ids: [], layer: shape.layer.get(node.id) });
    }
    boxes.get(key).ids.push(node.id);
  }
  const links = new Map();
  for (const edge of shape.edges) {
    const from = boxOf.get(edge.parent);
    const to = boxOf.get(edge.child);
    if (from === to) continue;
    const id = `${from}>${to}>${edge.on_parent_failure}`;
    if (!links.has(id)) links.set(id, { from, to, policy: edge.on_parent_failure, count: 0 });
    links.get(id).count += 1;
  }
  const ins = new Map();
  const outs = new Map();
  for (const link of links.values()) {
    if (!outs.has(link.from)) outs.set(link.from, []);
    outs.get(link.from).push(link.to);
    if (!ins.has(link.to)) ins.set(link.to, []);
    ins.get(link.to).push(link.from);
  }
  const columns = [];
  for (const box of boxes.values()) {
    while (columns.length <= box.layer) columns.push([]);
    columns[box.layer].push(box);
  }
  const position = new Map();
  const place = (column) => column.forEach((box, i) => position.set(box.key, i));
  for (const column of columns) {
    column.sort((a, b) => a.ids[0] - b.ids[0]);
    place(column);
  }
  const centre = (box, neighbours) => {
    const around = (neighbours.get(box.key) || []).map((key) => position.get(key));
    if (!around.length) return position.get(box.key);
    return around.reduce((sum, value) => sum + value, 0) / around.length;
  };
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    const down = sweep % 2 === 0;
    const order = down ? columns.slice(1) : columns.slice(0, -1).reverse();
    for (const column of order) {
      const weight = new Map(column.map((box) => [box.key, centre(box, down ? ins : outs)]));
      column.sort((a, b) => weight.get(a.key) - weight.get(b.key) || a.ids[0] - b.ids[0]);
      place(column);
    }
  }
  const tallest = Math.max(1, ...columns.map((column) => column.length));
  const row = BOX.height + ROW_GAP;
  for (const [layer, column] of columns.entries()) {
    const top = ((tallest - column.length) * row) / 2;
    column.forEach((box, i) => {
      box.x = layer * (BOX.width + LAYER_GAP);
      box.y = top + i * row;
    });
  }
  return {
    boxes: [...boxes.values()],
    links: [...links.values()],
    width: Math.max(1, columns.length * (BOX.width + LAYER_GAP) - LAYER_GAP),
    height: Math.max(1, tallest * row - ROW_GAP),
  };
}

// Which groups start collapsed: those of AUTO_COLLAPSE jobs or more.
export function initiallyCollapsed(shape) {
  const keys = new Set();
  for (const [key, ids] of shape.groups) if (ids.length >= AUTO_COLLAPSE) keys.add(key);
  return keys;
}
