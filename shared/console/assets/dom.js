// DOM and formatting helpers every page uses. Nodes are built with DOM
// calls and text only: nothing is ever parsed as HTML.

export const main = document.getElementById("main");

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function show(...nodes) {
  main.replaceChildren(...nodes);
  // Screen readers start at the new content; the page stays at its top.
  main.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

export function status(text) {
  document.getElementById("status").textContent = text;
}

export function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

export function opLink(id) {
  return h("a", { href: `#/operations/${encodeURIComponent(id)}` }, id);
}

export function problemText(p) {
  if (!p) return "";
  return [p.title, p.detail, p.field ? `(field: ${p.field})` : ""].filter(Boolean).join(" ");
}

export function when(iso) {
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}

export function hashParams() {
  const q = location.hash.split("?")[1] || "";
  return new URLSearchParams(q);
}

export function withParam(params, key, value) {
  const next = new URLSearchParams(params);
  if (value) next.set(key, value);
  else next.delete(key);
  return next.toString();
}

// Renders the page of the current address again (what the router does on
// a hash change), for a module that must not import the router.
export function reload() {
  window.dispatchEvent(new HashChangeEvent("hashchange"));
}
