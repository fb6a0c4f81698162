// The operator console. Every call goes to the public API with the signed-in
// operator's bearer token; decisions carry If-Match with the version the
// operator saw, and a 412 is shown, never retried. Pages are built with DOM
// calls and textContent only: nothing from the API is ever parsed as HTML.

const TOKEN = "genace-console-token";
const PKCE = "genace-console-pkce";
const PAGE = 25;
const REASONS = [
  "unknown_submit_outcome", "interrupted_dispatch", "remote_job_missing", "render_stalled",
  "delivery_failed", "settlement_pending", "outputs_missing", "output_url_refused",
  "output_too_large", "account_problem", "rate_limited",
];
const main = document.getElementById("main");
let config = { sign_in: "unconfigured" };

// ---- small helpers

function h(tag, attrs = {}, ...children) {
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

function show(...nodes) {
  main.replaceChildren(...nodes);
  // Screen readers start at the new content; the page stays at its top.
  main.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

function status(text) {
  document.getElementById("status").textContent = text;
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

function opLink(id) {
  return h("a", { href: `#/operations/${encodeURIComponent(id)}` }, id);
}

function problemText(p) {
  if (!p) return "";
  return [p.title, p.detail, p.field ? `(field: ${p.field})` : ""].filter(Boolean).join(" ");
}

// ---- the API

class SignedOut extends Error {}

async function api(method, path, { body, ifMatch } = {}) {
  const token = sessionStorage.getItem(TOKEN);
  if (!token) throw new SignedOut();
  const headers = { Authorization: `Bearer ${token}`, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (ifMatch) headers["If-Match"] = ifMatch;
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN);
    throw new SignedOut();
  }
  let data = null;
  const text = await res.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = { title: text }; }
  }
  return { status: res.status, ok: res.ok, etag: res.headers.get("ETag"), data };
}

// ---- signing in

function claims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part));
  } catch {
    return {};
  }
}

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
  who.textContent = signedIn ? `${c.sub || "operator"}${c.tenant_id ? ` (tenant ${c.tenant_id})` : ""}` : "";
}

// ---- cases

function hashParams() {
  const q = location.hash.split("?")[1] || "";
  return new URLSearchParams(q);
}

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

function withParam(params, key, value) {
  const next = new URLSearchParams(params);
  if (value) next.set(key, value);
  else next.delete(key);
  return next.toString();
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
  if (op.reconciliation_case) entries.push([op.reconciliation_case.opened_at, "system", `case opened: ${op.reconciliation_case.reason}`, op.reconciliation_case.evidence]);
  if (op.delivered_at) entries.push([op.delivered_at, "system", "delivered", ""]);
  if (op.outputs_erased_at) entries.push([op.outputs_erased_at, "system", "outputs erased", ""]);
  for (const a of op.audit || []) entries.push([a.at, a.actor, a.action, [a.reason, a.job_id ? `job ${a.job_id}` : ""].filter(Boolean).join("; ")]);
  entries.push([op.updated_at, "system", `last change (version ${op.version}, ${op.phase})`, ""]);
  entries.sort((a, b) => Date.parse(a[0]) - Date.parse(b[0]));
  return h("ol", { class: "timeline", id: "timeline" }, entries.map(([at, who, what, why]) =>
    h("li", {}, h("time", { datetime: at, title: at }, when(at)), ` ${what}, by ${who}`, why ? `: ${why}` : "")));
}

function when(iso) {
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
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

// ---- tenants

async function tenantsPage() {
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
async function tenantPage(tenant) {
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
    if (res.ok) route();
    else note.textContent = `refused: ${problemText(res.data)}`;
  });
  return h("span", {}, button, note);
}

// One endpoint's delivery log, newest first, with replay of one event and
// recovery of every failed one since a time.
async function endpointPage(tenant, id) {
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

// ---- routing

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
