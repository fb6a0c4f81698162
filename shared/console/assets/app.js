// The operator console. Every call goes to the public API with the signed-in
// operator's bearer token; decisions carry If-Match with the version the
// operator saw, and a 412 is shown, never retried. Pages are built with DOM
// calls and textContent only: nothing from the API is ever parsed as HTML.

import { PAGE, SignedOut, TOKEN, api, claims } from "./api.js";
import { age, h, hashParams, main, opLink, problemText, show, status, when, withParam } from "./dom.js";
import { endpointPage, tenantPage, tenantsPage } from "./tenants.js";
import { traceSection } from "./trace.js";

const PKCE = "genace-console-pkce";
const REASONS = [
  "unknown_submit_outcome", "interrupted_dispatch", "remote_job_missing", "render_stalled",
  "delivery_failed", "settlement_pending", "outputs_missing", "output_url_refused",
  "output_too_large", "account_problem", "rate_limited",
];
let config = { sign_in: "unconfigured" };

// ---- signing in

function base64url(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function redirectUri() {
  return `${location.origin}/console`;
}

async function startOidc() {
  const verifier = base64url(crypto.getRandomValues(new Uint8Array(32)));
  const state = base64url(crypto.getRandomValues(new Uint8Array(16)));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  sessionStorage.setItem(PKCE, JSON.stringify({ verifier, state }));
  const url = new URL(config.authorize_url);
  url.search = new URLSearchParams({
    response_type: "code",
    client_id: config.client_id,
    redirect_uri: redirectUri(),
    scope: config.scope,
    state,
    code_challenge: base64url(digest),
    code_challenge_method: "S256",
  }).toString();
  location.assign(url.toString());
}

// The issuer sent the browser back with ?code=&state=: redeem the code
// with the verifier only this tab holds.
async function finishOidc(params) {
  const saved = JSON.parse(sessionStorage.getItem(PKCE) || "{}");
  sessionStorage.removeItem(PKCE);
  history.replaceState(null, "", redirectUri() + "#/cases");
  if (!saved.state || saved.state !== params.get("state")) {
    throw new Error("The sign-in answer does not match the sign-in this tab started. Sign in again.");
  }
  const res = await fetch(config.token_url, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: params.get("code"),
      redirect_uri: redirectUri(),
      client_id: config.client_id,
      code_verifier: saved.verifier,
    }),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok || !data.access_token) {
    throw new Error(`The issuer refused the sign-in: ${data.error_description || data.error || res.status}`);
  }
  sessionStorage.setItem(TOKEN, data.access_token);
}

function signInPage(message) {
  const nodes = [h("h1", {}, "Sign in")];
  if (message) nodes.push(h("p", { class: "notice error", role: "alert" }, message));
  if (config.sign_in === "oidc") {
    nodes.push(
      h("p", {}, "Operators sign in with the identity provider the API trusts."),
      h("button", { type: "button", id: "sign-in", onclick: () => startOidc().catch((e) => signInPage(e.message)) }, "Sign in"),
    );
  } else if (config.sign_in === "local") {
    const form = h("form", { id: "local-sign-in", class: "filters" },
      h("label", {}, "Operator name", h("input", { name: "operator", required: true, value: "local-operator" })),
      h("label", {}, "Limited to tenant (optional)", h("input", { name: "tenant" })),
      h("button", { type: "submit" }, "Sign in"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const fields = new FormData(form);
      const res = await fetch("/console/local/sign-in", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ operator: fields.get("operator"), tenant: fields.get("tenant") || null }),
      });
      const data = await res.json().catch(() => ({}));
      if (!res.ok) return signInPage(problemText(data) || `sign-in failed (${res.status})`);
      sessionStorage.setItem(TOKEN, data.access_token);
      location.hash = "#/cases";
      route();
    });
    nodes.push(h("p", {}, "The local stack's sign-in: it mints a development operator token."), form);
  } else {
    nodes.push(h("p", { class: "notice error" },
      "The console is not configured: deploy with the ConsoleClientId, ConsoleAuthorizeUrl and ConsoleTokenUrl parameters."));
  }
  chrome(false);
  show(...nodes);
}

function chrome(signedIn) {
  document.getElementById("search").hidden = !signedIn;
  document.getElementById("sign-out").hidden = !signedIn;
  const c = signedIn ? claims(sessionStorage.getItem(TOKEN)) : {};
  const who = document.getElementById("who");
  who.textContent = signedIn ? `${c.sub || "operator"} (${operatorKind(c)})` : "";
}

// Which kind of operator the token signs in, under the deployment's claim
// names: the API decides the same way, and refuses the third kind.
function operatorKind(c) {
  const names = config.claims || { tenant: "tenant_id", operator: "scope", global_operator: "genace:operator:all" };
  const tenant = c[names.tenant];
  if (tenant) return `operator of tenant ${tenant}`;
  const scopes = [].concat(c[names.operator] || []).join(" ").replace(/[[\]]/g, "").split(/[\s,]+/);
  return scopes.includes(names.global_operator) ? "operator of every tenant" : "operator of no tenant: refused";
}

// ---- cases

async function casesPage() {
  const params = hashParams();
  const reason = params.get("reason") || "";
  const tenant = params.get("tenant") || "";
  const minAge = Number(params.get("older_than_hours") || 0);
  const cursors = (params.get("cursors") || "").split(",").filter(Boolean);
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (reason) query.set("reason", reason);
  if (tenant) query.set("tenant", tenant);
  // The cutoff is fixed when the filter is set, so every page of one
  // listing agrees on it.
  const before = params.get("opened_before");
  if (before) query.set("opened_before", before);
  if (cursors.length) query.set("cursor", cursors[cursors.length - 1]);
  const counting = new URLSearchParams();
  if (tenant) counting.set("tenant", tenant);
  // The page of cases first; the counts, which read every open case's key,
  // are asked once it shows and fill in when they arrive.
  const res = await api("GET", `/v1/reconciliation-cases?${query}`);
  if (!res.ok) return show(h("h1", {}, "Open cases"), h("p", { class: "notice error", role: "alert" }, problemText(res.data)));
  const cases = res.data.cases;

  const filters = h("form", { class: "filters", id: "case-filters", "aria-label": "Filter cases" },
    h("label", {}, "Reason", h("select", { name: "reason" },
      h("option", { value: "" }, "any"),
      REASONS.map((r) => h("option", { value: r, selected: r === reason }, r)))),
    h("label", {}, "Tenant", h("input", { name: "tenant", value: tenant })),
    h("label", {}, "Open at least (hours)", h("input", { name: "older_than_hours", type: "number", min: 0, value: minAge || "" })),
    h("button", { type: "submit" }, "Filter"));
  filters.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(filters);
    const next = new URLSearchParams();
    for (const k of ["reason", "tenant", "older_than_hours"]) if (f.get(k)) next.set(k, f.get(k));
    const hours = Number(f.get("older_than_hours") || 0);
    if (hours > 0) next.set("opened_before", new Date(Date.now() - hours * 3600 * 1000).toISOString());
    location.hash = `#/cases?${next}`;
  });

  const counts = h("nav", { class: "counts", id: "counts", "aria-label": "Open cases by reason", "aria-busy": "true" }, "Counting…");
  const countsAnswer = new Promise((resolve) => setTimeout(resolve, 0))
    .then(() => api("GET", `/v1/reconciliation-cases/counts?${counting}`));
  countsAnswer.then((counted) => {
    counts.removeAttribute("aria-busy");
    if (!counted.ok) return counts.replaceChildren(`Counts unavailable: ${problemText(counted.data)}`);
    counts.replaceChildren(
      h("span", {}, `${counted.data.open} open${tenant ? ` for ${tenant}` : ""}:`),
      ...counted.data.reasons.map((r) => h("span", {},
        h("a", { href: `#/cases?${withParam(withParam(params, "cursors", ""), "reason", r.reason)}`, "data-reason": r.reason },
          `${r.reason}: ${r.open}`),
        ` (oldest ${age(r.oldest_opened_at)})`)));
  }, (e) => counts.replaceChildren(`Counts unavailable: ${e.message}`));
  const selected = new Map();
  const bulk = h("section", { id: "bulk", "aria-label": "Bulk resolution" });
  const rows = cases.map((c) => {
    const box = h("input", {
      type: "checkbox",
      class: "pick",
      "data-operation": c.operation_id,
      "aria-label": `Select the case of ${c.operation_id}`,
    });
    box.addEventListener("change", () => {
      if (box.checked) selected.set(c.operation_id, c);
      else selected.delete(c.operation_id);
      const one = [...selected.values()][0];
      // One reason at a time: one resolution must suit every item.
      for (const other of document.querySelectorAll("input.pick")) {
        const theirs = cases.find((x) => x.operation_id === other.dataset.operation);
        other.disabled = Boolean(one) && theirs.reason !== one.reason;
      }
      bulkForm(bulk, [...selected.values()]);
    });
    return h("tr", { "data-operation": c.operation_id },
      h("td", {}, box),
      h("td", {}, h("time", { datetime: c.opened_at, title: c.opened_at }, age(c.opened_at))),
      h("td", {}, c.reason),
      h("td", {}, c.tenant_id),
      h("td", {}, opLink(c.operation_id), h("br"), h("small", {}, c.operation_key)),
      h("td", {}, c.remote_job_id || "unknown"),
      h("td", {}, c.evidence),
      h("td", {}, h("strong", {}, (c.runbook?.actions || []).join(" or ")),
        h("details", { class: "advice" }, h("summary", {}, "How to choose"), c.runbook?.advice || "")));
  });
  const nextCursors = [...cursors, res.data.next_cursor].join(",");
  const pager = h("nav", { "aria-label": "Pages of cases" },
    cursors.length ? h("a", { href: `#/cases?${withParam(params, "cursors", cursors.slice(0, -1).join(","))}` }, "Previous page") : null,
    " ",
    res.data.next_cursor ? h("a", { href: `#/cases?${withParam(params, "cursors", nextCursors)}`, id: "next-page" }, "Next page") : null);
  show(
    h("h1", {}, "Open cases"),
    filters,
    counts,
    cases.length === 0
      ? h("p", { id: "no-cases" }, "No open cases on this page.")
      : h("table", { id: "cases" },
        h("caption", {}, `Open cases${reason ? ` of ${reason}` : ""}, oldest first (page ${cursors.length + 1}, ${cases.length} shown)`),
        h("thead", {}, h("tr", {}, ["", "Open for", "Reason", "Tenant", "Operation", "Remote job", "Evidence", "Runbook"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows)),
    pager,
    bulk,
  );
}

function bulkForm(section, items) {
  if (items.length === 0) return section.replaceChildren();
  const reason = items[0].reason;
  const actions = [...new Set([...(items[0].runbook?.actions || []), "abandon"])];
  const action = h("select", { name: "action", id: "bulk-action" }, actions.map((a) => h("option", { value: a }, a)));
  const jobs = h("div", { id: "bulk-jobs" });
  const renderJobs = () => jobs.replaceChildren(...(action.value === "attach_remote_job"
    ? items.map((c) => h("label", {}, `Job id for ${c.operation_id}`,
      h("input", { name: `job:${c.operation_id}`, required: true, value: c.remote_job_id || "" })))
    : []));
  action.addEventListener("change", renderJobs);
  renderJobs();
  const results = h("div", { id: "bulk-results", "aria-live": "polite" });
  const form = h("form", { class: "bulk", id: "bulk-form" },
    h("h2", {}, `Resolve ${items.length} case${items.length === 1 ? "" : "s"} of ${reason}`),
    h("label", {}, "Decision", action),
    jobs,
    h("label", {}, "Reason (recorded in each audit trail)", h("textarea", { name: "reason", required: true, rows: 2, cols: 50 })),
    h("button", { type: "submit" }, "Apply to each"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const rows = [];
    for (const c of items) {
      const body = { action: action.value, reason: f.get("reason") };
      if (action.value === "attach_remote_job") body.job_id = f.get(`job:${c.operation_id}`);
      // Each item carries the version it was listed with.
      const res = await api("POST", `/v1/operations/${encodeURIComponent(c.operation_id)}/resolution`,
        { body, ifMatch: `"${c.version}"` });
      const outcome = res.ok ? "done" : res.status === 412 ? "changed meanwhile" : "refused";
      rows.push(h("tr", { "data-operation": c.operation_id, "data-outcome": outcome },
        h("td", {}, opLink(c.operation_id)), h("td", {}, outcome), h("td", {}, res.ok ? `now ${res.data.phase}` : problemText(res.data))));
    }
    results.replaceChildren(h("table", { id: "bulk-outcomes" },
      h("caption", {}, "Outcome per case"),
      h("thead", {}, h("tr", {}, ["Operation", "Outcome", "Detail"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows)),
    h("button", { type: "button", onclick: () => route() }, "Reload the cases"));
    status(`${rows.filter((r) => r.dataset.outcome === "done").length} of ${items.length} done`);
  });
  section.replaceChildren(form, results);
}

// ---- one operation

async function operationPage(id) {
  const res = await api("GET", `/v1/operations/${encodeURIComponent(id)}`);
  if (!res.ok) return show(h("h1", {}, id), h("p", { class: "notice error", role: "alert" }, problemText(res.data)));
  const op = res.data;
  const etag = res.etag;
  const facts = [
    ["Operation", op.operation_id], ["Key", op.operation_key], ["Tenant", op.tenant_id || ""],
    ["Phase", op.phase], ["Delivery", op.delivery_state], ["Version", op.version],
    ["Remote job", op.remote_job_id || "unknown"], ["Remote state", op.remote_state || ""],
    ["Priority", op.priority || ""], ["Credits held", op.held_credits ?? ""], ["Settlement", op.settlement || ""],
  ];
  const nodes = [
    h("h1", {}, `Operation ${op.operation_id}`),
    h("dl", { class: "facts", id: "facts" }, facts.filter(([, v]) => v !== "")
      .flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-fact": k }, String(v))])),
  ];
  if (op.reconciliation_case) {
    const c = op.reconciliation_case;
    nodes.push(h("section", { class: "notice", id: "case", "aria-label": "Open case" },
      h("h2", {}, `Open case: ${c.reason}`),
      h("p", {}, `Opened ${age(c.opened_at)} ago. Evidence: ${c.evidence}`),
      h("p", {}, h("strong", {}, `Runbook: ${(c.runbook?.actions || []).join(" or ")}. `), c.runbook?.advice || "")));
  }
  if (op.queue) nodes.push(h("p", { class: "notice" }, `Waiting for ${op.queue.reason} since ${op.queue.since}, position ${op.queue.position ?? "uncounted"}.`));
  const actions = op.resolutions || [];
  nodes.push(h("h2", {}, "Decisions this version takes"));
  nodes.push(actions.length
    ? h("div", { id: "actions" }, actions.map((a) => actionForm(op, etag, a)))
    : h("p", {}, "None: nothing here waits for a person."));
  nodes.push(h("h2", {}, "Timeline"), timeline(op));
  nodes.push(h("h2", {}, "Trace"), traceSection(op.operation_id));
  nodes.push(h("h2", {}, "Specification"), h("pre", {}, JSON.stringify(op.specification, null, 2)));
  if (op.last_error) nodes.push(h("h2", {}, "Last error"), h("pre", {}, JSON.stringify(op.last_error, null, 2)));
  if (op.delivered_objects?.length) {
    nodes.push(h("h2", {}, "Outputs"), h("ul", {}, op.delivered_objects.map((o) =>
      h("li", {}, o.url ? h("a", { href: o.url, rel: "noopener noreferrer" }, o.key) : o.key, ` (${o.content_type}, ${o.bytes} bytes, sha256 ${o.sha256})`))));
  }
  nodes.push(erasure(op));
  show(...nodes);
}

// Erasure: what was deleted, or the button while no delivery can run (the
// API decides; a refusal shows its reason).
function erasure(op) {
  if (op.outputs_erased_at) {
    const keys = op.erased_objects || [];
    return h("section", { id: "erasure", "aria-label": "Erasure" }, h("h2", {}, "Erasure"),
      h("p", {}, `Erased ${op.outputs_erased_at}: ${op.erased_object_count ?? keys.length} objects deleted.`
        + (keys.length < (op.erased_object_count ?? 0) ? ` The first ${keys.length} are listed.` : "")),
      keys.length ? h("ul", {}, keys.map((k) => h("li", {}, h("code", {}, k)))) : "");
  }
  const over = (op.phase === "rendered" && ["delivered", "delivery_failed"].includes(op.delivery_state))
    || ["abandoned", "cancelled", "rejected", "render_failed", "submit_failed"].includes(op.phase);
  if (!over) return "";
  const note = h("div", { "aria-live": "polite" });
  const button = h("button", { type: "button", id: "erase" }, "Erase every stored output");
  button.addEventListener("click", async () => {
    if (!window.confirm(`Delete every object stored for ${op.operation_id}? This cannot be undone.`)) return;
    const r = await api("DELETE", `/v1/operations/${encodeURIComponent(op.operation_id)}/outputs`);
    if (r.ok) return operationPage(op.operation_id);
    note.replaceChildren(h("p", { class: "notice error", role: "alert" }, `Refused (${r.status}): ${problemText(r.data)}`));
  });
  return h("section", { id: "erasure", "aria-label": "Erasure" }, h("h2", {}, "Erasure"),
    h("p", {}, "Deletes the delivered outputs and anything earlier delivery attempts left; no delivery runs after it."), button, note);
}

function timeline(op) {
  const entries = [[op.created_at, "system", "intent recorded", ""]];
  if (op.accepted_at) entries.push([op.accepted_at, "system", "accepted by Genace", op.remote_job_id || ""]);
  if (op.observed_at) entries.push([op.observed_at, "system", `observed ${op.remote_state || ""}`, ""]);
  const d = op.detection;
  if (d) {
    const looks = d.looked_at || [];
    looks.slice(0, -1).forEach((at, i) => entries.push([at, "poll", `look ${d.looks - looks.length + i + 1} of ${d.looks}`,
      at === d.last_running_at ? "last seen running" : ""]));
    const lag = d.lag_bound_seconds === null ? "no look saw it running" : `it ended within the ${d.lag_bound_seconds.toFixed(1)} s before`;
    entries.push([d.ended_seen_at, "poll", `end seen at look ${d.looks} of ${d.looks}`, lag]);
  }
  if (op.reconciliation_case) entries.push([op.reconciliation_case.opened_at, "system", `case opened: ${op.reconciliation_case.reason}`, op.reconciliation_case.evidence]);
  if (op.delivered_at) entries.push([op.delivered_at, "system", "delivered", ""]);
  if (op.outputs_erased_at) entries.push([op.outputs_erased_at, "system", "outputs erased", ""]);
  for (const a of op.audit || []) entries.push([a.at, a.actor, a.action, [a.reason, a.job_id ? `job ${a.job_id}` : ""].filter(Boolean).join("; ")]);
  entries.push([op.updated_at, "system", `last change (version ${op.version}, ${op.phase})`, ""]);
  entries.sort((a, b) => Date.parse(a[0]) - Date.parse(b[0]));
  return h("ol", { class: "timeline", id: "timeline" }, entries.map(([at, who, what, why]) =>
    h("li", {}, h("time", { datetime: at, title: at }, when(at)), ` ${what}, by ${who}`, why ? `: ${why}` : "")));
}

function actionForm(op, etag, action) {
  const outcome = h("div", { class: "outcome", "aria-live": "polite" });
  const form = h("form", { class: "action", "data-action": action },
    h("h3", {}, action),
    action === "attach_remote_job" ? h("label", {}, "Genace job id", h("input", { name: "job_id", required: true })) : null,
    h("label", {}, "Reason", h("input", { name: "reason", required: true, size: 40 })),
    h("button", { type: "submit" }, `Apply ${action}`),
    outcome);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const body = { action, reason: f.get("reason") };
    if (f.get("job_id")) body.job_id = f.get("job_id");
    const res = await api("POST", `/v1/operations/${encodeURIComponent(op.operation_id)}/resolution`, { body, ifMatch: etag });
    if (res.ok) {
      outcome.replaceChildren(h("p", { class: "notice ok", role: "alert" }, `Done: the operation is now ${res.data.phase} (version ${res.data.version}).`),
        h("button", { type: "button", onclick: () => route() }, "Reload"));
    } else if (res.status === 412) {
      // Never retried: the operator decides again on what is there now.
      const now = await api("GET", `/v1/operations/${encodeURIComponent(op.operation_id)}`);
      outcome.replaceChildren(h("p", { class: "notice stale", role: "alert", id: "stale" },
        "Someone changed this operation since you opened it. Nothing was applied. ",
        now.ok ? `It is now ${now.data.phase} at version ${now.data.version}${now.data.reconciliation_case ? "" : ", with no open case"}.` : ""),
      h("button", { type: "button", onclick: () => route() }, "Reload the operation"));
    } else {
      outcome.replaceChildren(h("p", { class: "notice error", role: "alert" }, `Refused (${res.status}): ${problemText(res.data)}`));
    }
  });
  return form;
}

// ---- search

async function searchPage() {
  const params = hashParams();
  const q = (params.get("q") || "").trim();
  const tenant = (params.get("tenant") || "").trim();
  if (/^op_[0-9a-f]{32}$/.test(q)) {
    location.hash = `#/operations/${q}`;
    return;
  }
  const query = new URLSearchParams({ key_prefix: q, limit: String(PAGE) });
  if (tenant) query.set("tenant", tenant);
  const res = await api("GET", `/v1/operations?${query}`);
  if (!res.ok) return show(h("h1", {}, "Search"), h("p", { class: "notice error", role: "alert" }, problemText(res.data)));
  show(h("h1", {}, `Operations whose key starts with “${q}”`),
    res.data.operations.length === 0 ? h("p", {}, "None found.") : h("table", {},
      h("thead", {}, h("tr", {}, ["Operation", "Key", "Tenant", "Phase", "Created"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, res.data.operations.map((o) => h("tr", {},
        h("td", {}, opLink(o.operation_id)), h("td", {}, o.operation_key), h("td", {}, o.tenant_id || ""),
        h("td", {}, o.phase), h("td", {}, o.created_at))))));
}

// ---- routing (the tenants' pages are in tenants.js)

async function route() {
  if (!sessionStorage.getItem(TOKEN)) return signInPage();
  chrome(true);
  const hash = location.hash.split("?")[0];
  try {
    const endpoint = hash.match(/^#\/tenants\/([^/]+)\/endpoints\/([^/]+)$/);
    const tenant = hash.match(/^#\/tenants\/([^/]+)$/);
    if (hash.startsWith("#/operations/")) await operationPage(decodeURIComponent(hash.slice("#/operations/".length)));
    else if (endpoint) await endpointPage(decodeURIComponent(endpoint[1]), decodeURIComponent(endpoint[2]));
    else if (tenant) await tenantPage(decodeURIComponent(tenant[1]));
    else if (hash === "#/tenants") await tenantsPage();
    else if (hash === "#/search") await searchPage();
    else await casesPage();
  } catch (e) {
    if (e instanceof SignedOut) return signInPage("Your session ended. Sign in again.");
    show(h("h1", {}, "Something went wrong"), h("p", { class: "notice error", role: "alert" }, e.message));
  }
}

// An error nothing else caught is shown, never swallowed.
window.addEventListener("error", (e) => status(`Error: ${e.message}`));
window.addEventListener("unhandledrejection", (e) => status(`Error: ${e.reason?.message || e.reason}`));

async function start() {
  // The skip link moves focus to the content without touching the route.
  document.querySelector("a.skip").addEventListener("click", (e) => {
    e.preventDefault();
    main.focus();
  });
  config = await fetch("/console/config.json").then((r) => r.json()).catch(() => config);
  document.getElementById("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN);
    location.hash = "";
    signInPage();
  });
  const search = document.getElementById("search");
  search.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(search);
    const next = new URLSearchParams({ q: f.get("q") });
    if (f.get("tenant")) next.set("tenant", f.get("tenant"));
    location.hash = `#/search?${next}`;
  });
  window.addEventListener("hashchange", route);
  const params = new URLSearchParams(location.search);
  if (config.sign_in === "oidc" && params.get("code")) {
    try {
      await finishOidc(params);
    } catch (e) {
      return signInPage(e.message);
    }
  }
  await route();
}

start();
