// An operation's trace: the waterfall of its spans, read through the
// operators' trace route, or the link to the trace where it is deployed.

import { SignedOut, api } from "./api.js";
import { h, problemText, reload } from "./dom.js";

// The operation's trace as a waterfall: one row per span in causal order,
// its offset and duration, a bar on the trace's time scale, its name under
// its parent's, and its outcome or HTTP status. Deployed, a link to X-Ray.
export function traceSection(id) {
  const section = h("section", { id: "trace", "aria-label": "Trace", "aria-busy": "true" }, h("p", {}, "Reading the trace..."));
  api("GET", `/v1/operations/${encodeURIComponent(id)}/trace`).then((res) => {
    section.removeAttribute("aria-busy");
    if (!res.ok) return section.replaceChildren(h("p", { class: "notice error" }, problemText(res.data)));
    const t = res.data;
    if (t.source === "xray") {
      return section.replaceChildren(h("p", {}, h("a", { id: "trace-link", href: t.link, rel: "noopener noreferrer" }, `Trace ${t.trace_id} in X-Ray`)));
    }
    if (!t.spans.length) {
      return section.replaceChildren(h("p", {}, t.source === "none"
        ? "This deployment keeps no traces." : `No spans kept yet for trace ${t.trace_id}.`));
    }
    section.replaceChildren(waterfall(t));
  }).catch((e) => {
    if (e instanceof SignedOut) return reload();
    section.replaceChildren(h("p", { class: "notice error" }, String(e)));
  });
  return section;
}

function waterfall(t) {
  const total = Math.max(1, ...t.spans.map((s) => s.offset_ms + s.duration_ms));
  const seconds = (ms) => `${(ms / 1000).toFixed(3)} s`;
  const rows = t.spans.map((s) => {
    const bar = h("span", { class: "bar" });
    bar.style.marginLeft = `${(100 * s.offset_ms / total).toFixed(2)}%`;
    bar.style.width = `${Math.max(0.5, 100 * s.duration_ms / total).toFixed(2)}%`;
    const name = h("td", { class: "span-name" }, s.name);
    name.style.paddingLeft = `${0.5 + 1.2 * s.depth}rem`;
    return h("tr", { "data-span": s.name, "data-depth": s.depth },
      h("td", { class: "num" }, seconds(s.offset_ms)), h("td", { class: "num" }, seconds(s.duration_ms)),
      h("td", { class: "lane", "aria-hidden": "true" }, bar), name,
      h("td", {}, s.outcome ?? (s.status_code === null ? "" : String(s.status_code))), h("td", {}, s.service));
  });
  return h("table", { id: "waterfall" },
    h("caption", {}, `Trace ${t.trace_id}: ${t.spans.length} spans over ${seconds(total)}`),
    h("thead", {}, h("tr", {}, ["Offset", "Duration", "Time", "Span", "Outcome", "Service"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows));
}
