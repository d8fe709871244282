// Charts over time for the kind and queue pages, drawn as SVG from the API's bars: stacked
// bars for counts, lines for durations (a gap where a bar has no value). Every chart says what
// it shows in its accessible name and carries its figures as data attributes: data-total on
// the chart, data-start and data-value on each bar or point.

import { s } from "./dom.js";
import { duration } from "./format.js";

const WIDTH = 720;
const HEIGHT = 150;
const PAD_LEFT = 48;
const PAD_BOTTOM = 18;
const PAD_TOP = 6;

// A duration as the charts read it: milliseconds below a second.
export function took(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 1) return `${Math.max(0, Math.round(seconds * 1000))} ms`;
  return duration(seconds);
}

function frame(label, figures, topText, span, children) {
  const baseline = HEIGHT - PAD_BOTTOM;
  return s("svg", {
    class: "chart",
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: "img",
    "aria-label": label,
    ...figures,
  },
  s("line", { x1: PAD_LEFT, y1: baseline, x2: WIDTH, y2: baseline, class: "axis" }),
  s("line", { x1: PAD_LEFT, y1: PAD_TOP, x2: WIDTH, y2: PAD_TOP, class: "grid-line" }),
  s("text", { x: PAD_LEFT - 4, y: PAD_TOP + 6, class: "tick end" }, topText),
  s("text", { x: PAD_LEFT - 4, y: baseline, class: "tick end" }, "0"),
  s("text", { x: PAD_LEFT, y: HEIGHT - 3, class: "tick" }, `${span} ago`),
  s("text", { x: WIDTH, y: HEIGHT - 3, class: "tick end" }, "now"),
  children);
}

function slotWidth(buckets) {
  return (WIDTH - PAD_LEFT) / Math.max(1, buckets.length);
}

function when(bucket) {
  return `${bucket.start.slice(11, 16)} UTC`;
}

// Bars stacked from `series` ([key, css class, name]); `label` names what they count,
// `windowText` how far back they go ("6 hours"), `span` the same for the axis ("6 h").
export function barChart(buckets, series, { label, windowText, span, name }) {
  const plotHeight = HEIGHT - PAD_BOTTOM - PAD_TOP;
  const totals = buckets.map((b) => series.reduce((sum, [key]) => sum + b[key], 0));
  const total = totals.reduce((a, b) => a + b, 0);
  const top = Math.max(1, ...totals);
  const slot = slotWidth(buckets);
  const bars = [];
  buckets.forEach((bucket, i) => {
    let y = HEIGHT - PAD_BOTTOM;
    for (const [key, cls, what] of series) {
      const value = bucket[key];
      if (!value) continue;
      const height = (value / top) * plotHeight;
      y -= height;
      bars.push(s("rect", {
        x: (PAD_LEFT + i * slot + 1).toFixed(1),
        y: y.toFixed(1),
        width: Math.max(1, slot - 2).toFixed(1),
        height: height.toFixed(1),
        class: cls,
        "data-series": key,
        "data-start": bucket.start,
        "data-value": String(value),
      }, s("title", {}, `${when(bucket)}: ${value} ${what}`)));
    }
  });
  return frame(`${name}: ${total} ${label} in the last ${windowText}`, { "data-total": String(total) },
    String(top), span, bars);
}

// Lines of durations in seconds from `series` ([key, css class, name]).
export function lineChart(buckets, series, { windowText, span, name }) {
  const plotHeight = HEIGHT - PAD_BOTTOM - PAD_TOP;
  const values = buckets.flatMap((b) => series.map(([key]) => b[key])).filter((v) => v !== null);
  const top = Math.max(0.001, ...values);
  const slot = slotWidth(buckets);
  const x = (i) => PAD_LEFT + (i + 0.5) * slot;
  const y = (v) => HEIGHT - PAD_BOTTOM - (v / top) * plotHeight;
  const drawn = [];
  for (const [key, cls, what] of series) {
    let path = "";
    let open = false;
    buckets.forEach((bucket, i) => {
      const value = bucket[key];
      if (value === null) {
        open = false;
        return;
      }
      path += `${open ? "L" : "M"}${x(i).toFixed(1)} ${y(value).toFixed(1)} `;
      open = true;
      drawn.push(s("circle", {
        cx: x(i).toFixed(1),
        cy: y(value).toFixed(1),
        r: 2.5,
        class: `point ${cls}`,
        "data-series": key,
        "data-start": bucket.start,
        "data-value": String(value),
      }, s("title", {}, `${when(bucket)}: ${what} ${took(value)}`)));
    });
    if (path) drawn.unshift(s("path", { d: path.trim(), class: `line ${cls}`, "data-series": key }));
  }
  const label = values.length
    ? `${name} in the last ${windowText}, highest ${took(top)}`
    : `${name} in the last ${windowText}: nothing ended`;
  return frame(label, { "data-points": String(values.length) }, values.length ? took(top) : "",
    span, drawn);
}
