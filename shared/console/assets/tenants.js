// Tenants: credits and limits, Genace's capacity, each tenant's cases and
// webhook endpoints, and an endpoint's attempt log.

import { PAGE, TOKEN, api, claims } from "./api.js";
import { h, hashParams, problemText, reload, show, withParam } from "./dom.js";

export async function tenantsPage() {
  const [credits, capacity] = await Promise.all([api("GET", "/v1/credits?limit=100"), api("GET", "/v1/capacity")]);
  const nodes = [h("h1", {}, "Tenants")];
  if (!credits.ok) nodes.push(h("p", { class: "notice error", role: "alert" }, problemText(credits.data)));
  else {
    nodes.push(h("table", { id: "credits" },
      h("caption", {}, "Credits and spend limits"),
      h("thead", {}, h("tr", {}, ["Tenant", "Held", "Spent", "Pending refund", "Settled", "Available", "Spend limit"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, credits.data.tenants.map((t) => h("tr", { "data-tenant": t.tenant_id },
        h("td", {}, h("a", { href: `#/tenants/${encodeURIComponent(t.tenant_id)}` }, t.tenant_id)),
        h("td", {}, t.held), h("td", {}, t.spent), h("td", {}, t.pending_refund),
        h("td", {}, t.settled), h("td", {}, t.available ?? "no limit"),
        h("td", {}, limitForm(t.tenant_id, "spend-limit", "spend_limit", t.spend_limit, "Spend limit")))))));
  }
  if (capacity.ok) nodes.push(...capacityTables(capacity.data));
  show(...nodes);
}

function capacityTables(c) {
  const account = [
    ["Limit in force", c.max_in_flight ?? "none"],
    ["Deployed limit (GENACE_MAX_IN_FLIGHT)", c.configured_max_in_flight ?? "none"],
    ["Set at run time", c.set_at_run_time ? "yes" : "no"],
    ["Effective now (learned from 429s)", c.effective_max_in_flight ?? "none"],
    ["Jobs in flight", c.in_flight ?? "not shown to a tenant's operator"],
    ["Operations waiting", c.waiting ?? "not shown to a tenant's operator"],
    ["Oldest wait since", c.oldest_wait_since ?? "none"],
  ];
  return [
    h("h2", {}, "Genace capacity"),
    h("dl", { class: "facts", id: "capacity" }, account.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])),
    h("table", { id: "capacity-tenants" },
      h("caption", {}, "Jobs in flight and waiting, per tenant"),
      h("thead", {}, h("tr", {}, ["Tenant", "In flight", "Waiting", "Oldest wait since", "Own limit"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, c.tenants.map((t) => h("tr", {},
        h("td", {}, h("a", { href: `#/tenants/${encodeURIComponent(t.tenant_id)}` }, t.tenant_id)),
        h("td", {}, t.in_flight), h("td", {}, t.waiting), h("td", {}, t.oldest_wait_since ?? ""),
        h("td", {}, limitForm(t.tenant_id, "max-in-flight", "max_in_flight", t.max_in_flight, "Jobs in flight at most")))))),
  ];
}

// A tenant's limit (spend or jobs in flight), edited in place; empty removes it.
// An operator scoped to one tenant reads the limit only: a tenant's limits
// are the platform's (the API answers 403 platform-limit).
function limitForm(tenant, route, member, value, label) {
  if (claims(sessionStorage.getItem(TOKEN)).tenant_id) {
    return h("span", { "data-limit": member }, `${value ?? "none"} (set by an operator of every tenant)`);
  }
  const note = h("span", { "aria-live": "polite" });
  const form = h("form", { class: "action" },
    h("label", {}, `${label} for ${tenant} (empty: none)`,
      h("input", { name: "limit", type: "number", min: member === "max_in_flight" ? 1 : 0, step: member === "max_in_flight" ? 1 : "any", value: value ?? "" })),
    h("button", { type: "submit" }, "Save"), note);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const raw = new FormData(form).get("limit");
    const res = await api("PUT", `/v1/tenants/${encodeURIComponent(tenant)}/${route}`,
      { body: { [member]: raw === "" ? null : Number(raw) } });
    note.textContent = res.ok ? "saved" : `refused: ${problemText(res.data)}`;
  });
  return form;
}

// One tenant: its webhook endpoints, each with its state and a link to its log.
export async function tenantPage(tenant) {
  const t = encodeURIComponent(tenant);
  const [endpoints, cases] = await Promise.all([
    api("GET", `/v1/webhooks/endpoints?tenant=${t}`),
    api("GET", `/v1/reconciliation-cases/counts?tenant=${t}`),
  ]);
  const nodes = [h("h1", {}, `Tenant ${tenant}`)];
  if (cases.ok) {
    nodes.push(h("p", {}, h("a", { href: `#/cases?tenant=${t}` }, `${cases.data.open} open case${cases.data.open === 1 ? "" : "s"}`)));
  }
  nodes.push(h("h2", {}, "Webhook endpoints"));
  if (!endpoints.ok) nodes.push(h("p", { class: "notice error", role: "alert" }, problemText(endpoints.data)));
  else if (endpoints.data.endpoints.length === 0) nodes.push(h("p", { id: "no-endpoints" }, "None."));
  else {
    nodes.push(h("table", { id: "endpoints" },
      h("thead", {}, h("tr", {}, ["Endpoint", "URL", "Events", "State", ""].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, endpoints.data.endpoints.map((ep) => h("tr", { "data-endpoint": ep.id },
        h("td", {}, h("a", { href: `#/tenants/${t}/endpoints/${encodeURIComponent(ep.id)}` }, ep.id), h("br"), h("small", {}, ep.description)),
        h("td", {}, ep.url),
        h("td", {}, ep.events.length ? ep.events.join(", ") : "every type"),
        h("td", { "data-state": ep.enabled ? "enabled" : "disabled" }, endpointState(ep)),
        h("td", {}, toggleForm(tenant, ep)))))));
  }
  show(...nodes);
}

function endpointState(ep) {
  if (!ep.enabled) return `disabled${ep.disabled_reason ? `: ${ep.disabled_reason}` : ""}${ep.disabled_at ? ` (${ep.disabled_at})` : ""}`;
  return ep.failing_since ? `enabled, failing since ${ep.failing_since}` : "enabled";
}

function toggleForm(tenant, ep) {
  const note = h("span", { "aria-live": "polite" });
  const verb = ep.enabled ? "Disable" : "Enable";
  const button = h("button", { type: "button", "data-toggle": ep.id }, `${verb} ${ep.id}`);
  button.addEventListener("click", async () => {
    const res = await api("PATCH", `/v1/webhooks/endpoints/${encodeURIComponent(ep.id)}?tenant=${encodeURIComponent(tenant)}`,
      { body: { enabled: !ep.enabled } });
    if (res.ok) reload();
    else note.textContent = `refused: ${problemText(res.data)}`;
  });
  return h("span", {}, button, note);
}

// One endpoint's delivery log, newest first, with replay of one event and
// recovery of every failed one since a time.
export async function endpointPage(tenant, id) {
  const params = hashParams();
  const statusFilter = params.get("status") || "";
  const cursors = (params.get("cursors") || "").split(",").filter(Boolean);
  const query = new URLSearchParams({ tenant, limit: String(PAGE) });
  if (statusFilter) query.set("status", statusFilter);
  if (cursors.length) query.set("cursor", cursors[cursors.length - 1]);
  const path = `/v1/webhooks/endpoints/${encodeURIComponent(id)}`;
  const res = await api("GET", `${path}/attempts?${query}`);
  if (!res.ok) return show(h("h1", {}, id), h("p", { class: "notice error", role: "alert" }, problemText(res.data)));
  const note = h("div", { "aria-live": "polite", id: "endpoint-note" });
  const base = `#/tenants/${encodeURIComponent(tenant)}/endpoints/${encodeURIComponent(id)}`;
  const filter = h("nav", { "aria-label": "Filter the log" },
    ["", "failed", "skipped", "succeeded"].map((st) => h("a", { href: st ? `${base}?status=${st}` : base, "aria-current": st === statusFilter ? "page" : null }, st || "all")).flatMap((a) => [a, " "]));
  const rows = res.data.attempts.map((a) => {
    const replay = h("button", { type: "button", "data-replay": a.event_id }, `Replay ${a.event_type}`);
    replay.addEventListener("click", async () => {
      const r = await api("POST", `${path}/replay?tenant=${encodeURIComponent(tenant)}`, { body: { event_id: a.event_id } });
      note.replaceChildren(h("p", { class: `notice ${r.ok ? "ok" : "error"}`, role: "alert" },
        r.ok ? `Queued ${a.event_id} again, with its original id.` : `Refused (${r.status}): ${problemText(r.data)}`));
    });
    return h("tr", { "data-event": a.event_id, "data-status": a.status },
      h("td", {}, a.at), h("td", {}, a.event_type), h("td", {}, h("code", {}, a.event_id)), h("td", {}, a.attempt),
      h("td", {}, a.status), h("td", {}, a.http_status ?? a.error ?? ""), h("td", {}, a.status === "skipped" ? "not sent" : `${a.latency_ms} ms`), h("td", {}, replay));
  });
  const recover = h("form", { class: "action", id: "recover" },
    h("label", {}, "Send again every event that failed or was skipped since (hours ago)", h("input", { name: "hours", type: "number", min: 1, required: true, value: 24 })),
    h("button", { type: "submit" }, "Recover"));
  recover.addEventListener("submit", async (e) => {
    e.preventDefault();
    const hours = Number(new FormData(recover).get("hours"));
    const since = new Date(Date.now() - hours * 3600 * 1000).toISOString();
    const r = await api("POST", `${path}/recover?tenant=${encodeURIComponent(tenant)}&since=${encodeURIComponent(since)}`);
    note.replaceChildren(h("p", { class: `notice ${r.ok ? "ok" : "error"}`, role: "alert" },
      r.ok ? `Queued again: ${JSON.stringify(r.data)}` : `Refused (${r.status}): ${problemText(r.data)}`));
  });
  show(
    h("h1", {}, `Endpoint ${id} of ${tenant}`),
    filter,
    note,
    rows.length === 0 ? h("p", { id: "no-attempts" }, "No attempts on this page.") : h("table", { id: "attempts" },
      h("caption", {}, "Delivery log, newest first"),
      h("thead", {}, h("tr", {}, ["At", "Event", "Id", "Attempt", "Outcome", "Status or error", "Latency", ""].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows)),
    res.data.next_cursor ? h("a", { href: `${base}?${withParam(params, "cursors", [...cursors, res.data.next_cursor].join(","))}` }, "Next page") : null,
    recover,
  );
}
