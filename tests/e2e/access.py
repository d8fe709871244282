"""Checks of what a page offers people who read it with low vision or use a keyboard, run in
the page: text contrast (WCAG 2), a name for every control, and every control reachable by
the keyboard."""

from __future__ import annotations

#: Every element of the view that shows text, with the contrast of its text (its colour, or an
#: SVG text's fill) against the first opaque background behind it (WCAG 2: 4.5:1, 3:1 for large
#: text); those below it, described.
LOW_CONTRAST = """
() => {
  const channel = (c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  const parse = (text) => (text.match(/[\\d.]+/g) || []).map(Number);
  const luminance = ([r, g, b]) =>
    0.2126 * channel(r / 255) + 0.7152 * channel(g / 255) + 0.0722 * channel(b / 255);
  const behind = (el) => {
    for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
      const [r, g, b, a = 1] = parse(getComputedStyle(node).backgroundColor);
      if (a > 0.9 && !(node instanceof SVGElement)) return [r, g, b];
    }
    return [255, 255, 255];
  };
  const low = [];
  for (const el of document.querySelectorAll("#view *")) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const style = getComputedStyle(el);
    const fg = parse(el instanceof SVGElement ? style.fill : style.color).slice(0, 3);
    const [hi, lo] = [luminance(fg), luminance(behind(el))].sort((x, y) => y - x);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const size = parseFloat(style.fontSize);
    const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
    if (ratio < (large ? 3 : 4.5)) {
      low.push(`${el.tagName.toLowerCase()}.${el.getAttribute("class")} "${el.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
    }
  }
  return low;
}
"""

#: The controls of the view (links, buttons, form fields, elements that act as buttons) that
#: have no accessible name: no text, aria-label, aria-labelledby, title or label element.
UNNAMED = """
() => {
  const named = (el) =>
    (el.getAttribute("aria-label") || "").trim() ||
    el.getAttribute("aria-labelledby") ||
    (el.getAttribute("title") || "").trim() ||
    (el.labels && el.labels.length) ||
    (["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName) ? "" : (el.textContent || "").trim());
  return [...document.querySelectorAll(
      "#view a[href], #view button, #view input:not([type=hidden]), #view select, " +
      "#view textarea, #view [role=button], #view [tabindex]")]
    .filter((el) => el.getClientRects().length && !named(el))
    .map((el) => el.outerHTML.slice(0, 100));
}
"""

#: The view's controls that the keyboard cannot reach: taken out of the tab order, or an
#: element acting as a button that is not focusable.
UNREACHABLE = """
() => [...document.querySelectorAll(
    "#view a[href], #view button, #view input:not([type=hidden]), #view select, " +
    "#view textarea, #view [role=button]")]
  .filter((el) => el.getClientRects().length && !el.disabled && el.tabIndex < 0)
  .map((el) => el.outerHTML.slice(0, 100))
"""
