// The overview's throughput chart: one stacked bar per minute (succeeded, dead, cancelled),
// drawn as SVG from /api/stats buckets.

import { s } from "./dom.js";

const WIDTH = 720;
const HEIGHT = 160;
const PAD_LEFT = 36;
const PAD_BOTTOM = 18;
const SERIES = [["succeeded", "bar-ok"], ["dead", "bar-dead"], ["cancelled", "bar-cancelled"]];

export function throughputChart(buckets) {
  const plotWidth = WIDTH - PAD_LEFT;
  const plotHeight = HEIGHT - PAD_BOTTOM - 6;
  const totals = buckets.map((b) => b.succeeded + b.dead + b.cancelled);
  const top = Math.max(1, ...totals);
  const slot = plotWidth / Math.max(1, buckets.length);
  const bars = [];
  buckets.forEach((bucket, i) => {
    let y = HEIGHT - PAD_BOTTOM;
    for (const [key, cls] of SERIES) {
      const value = bucket[key];
      if (!value) continue;
      const height = (value / top) * plotHeight;
      y -= height;
      const rect = s("rect", {
        x: (PAD_LEFT + i * slot + 1).toFixed(1),
        y: y.toFixed(1),
        width: Math.max(1, slot - 2).toFixed(1),
        height: height.toFixed(1),
        class: cls,
      });
      rect.append(s("title", {}, `${bucket.start.slice(11, 16)} UTC: ${value} ${key}`));
      bars.push(rect);
    }
  });
  const baseline = HEIGHT - PAD_BOTTOM;
  return s("svg", {
    class: "chart",
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: "img",
    "aria-label": "Jobs finished per minute over the last hour",
  },
  s("line", { x1: PAD_LEFT, y1: baseline, x2: WIDTH, y2: baseline, class: "axis" }),
  s("line", { x1: PAD_LEFT, y1: 6, x2: WIDTH, y2: 6, class: "grid-line" }),
  s("text", { x: PAD_LEFT - 4, y: 12, class: "tick end" }, String(top)),
  s("text", { x: PAD_LEFT - 4, y: baseline, class: "tick end" }, "0"),
  s("text", { x: PAD_LEFT, y: HEIGHT - 3, class: "tick" }, "60 min ago"),
  s("text", { x: WIDTH, y: HEIGHT - 3, class: "tick end" }, "now"),
  bars);
}
