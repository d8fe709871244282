// Building DOM from data without ever parsing data as HTML: text goes in with textContent,
// attributes with setAttribute, events with addEventListener.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(parent, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else if (child instanceof Node) parent.append(child);
    else parent.append(document.createTextNode(String(child)));
  }
}

// Links only ever point inside the dashboard: a hash route or a same-origin path.
function safeHref(value) {
  const text = String(value);
  return /^#\//.test(text) || /^\/(?!\/)/.test(text) ? text : "#/";
}

function setProps(el, props) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.setAttribute("class", value);
    else if (key === "text") el.textContent = String(value);
    else if (key === "on") {
      for (const [event, handler] of Object.entries(value)) el.addEventListener(event, handler);
    } else if (/^on/i.test(key)) throw new Error(`event attribute ${key}: use the "on" map`);
    else if (key === "href") el.setAttribute("href", safeHref(value));
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  setProps(el, props);
  append(el, children);
  return el;
}

export function s(tag, props, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setProps(el, props);
  append(el, children);
  return el;
}

export function replaceChildren(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

// Like el.append, but skipping null, undefined and false (which el.append would show as text).
export function appendChildren(el, ...children) {
  append(el, children);
}
