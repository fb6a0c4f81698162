/**
 * A client for the Genace operations HTTP API (docs/openapi.yaml), on the
 * global `fetch`.
 *
 * Request and response bodies are the types generated from the OpenAPI
 * document (src/schema.d.ts, `npm run generate`); every operation of the
 * document has a row in `ROUTES`, so a route added to the document fails
 * the build until the client knows it.
 */
import { Webhook, WebhookVerificationError } from "standardwebhooks";
import type { components, operations } from "./schema.js";

export type { components, operations, paths } from "./schema.js";
export { WebhookVerificationError };

// ---------------------------------------------------------------------------
// Types taken from the generated schema.

type Schemas = components["schemas"];
type OperationName = keyof operations;

/** The JSON body a response of `status` carries for operation `K`. */
type JsonResponse<K extends OperationName, S extends keyof operations[K]["responses"]> =
  operations[K]["responses"][S] extends { content: { "application/json": infer B } } ? B : never;
/** The JSON request body of operation `K`. */
type JsonRequest<K extends OperationName> =
  NonNullable<operations[K]["requestBody"]> extends { content: { "application/json": infer B } } ? B : never;
/** The query parameters of operation `K`. */
type Query<K extends OperationName> = NonNullable<operations[K]["parameters"]["query"]>;

export type IntentRequest = JsonRequest<"createOperation">;
export type Phase = Schemas["Phase"];
export type DeliveryState = Schemas["DeliveryState"];
export type TenantCredits = JsonResponse<"getMyCredits", 200>;
export type CreditsPage = JsonResponse<"listCredits", 200>;
export type Capacity = JsonResponse<"getCapacity", 200>;
export type TenantSlots = JsonResponse<"setMaxInFlight", 200>;
export type OperationTrace = JsonResponse<"readOperationTrace", 200>;
export type CaseSummary = Schemas["CaseSummary"];
export type CaseCounts = JsonResponse<"countCases", 200>;
export type ResolutionRequest = JsonRequest<"resolveOperation">;
export type WebhookView = JsonResponse<"getWebhook", 200>;
export type WebhookRequest = JsonRequest<"setWebhook">;
export type Endpoint = JsonResponse<"getWebhookEndpoint", 200>;
export type EndpointWithSecret = JsonResponse<"createWebhookEndpoint", 201>;
export type EndpointRequest = JsonRequest<"createWebhookEndpoint">;
export type EndpointUpdate = JsonRequest<"updateWebhookEndpoint">;
export type DeliveryAttempt = Schemas["DeliveryAttempt"];
export type Replayed = JsonResponse<"replayWebhookEvent", 202>;
export type Recovered = JsonResponse<"recoverWebhookEvents", 202>;
export type OperationFilter = Omit<Query<"listOperations">, "cursor">;
export type CaseFilter = Omit<Query<"listCases">, "cursor">;
export type AttemptFilter = Omit<Query<"listWebhookEndpointAttempts">, "cursor">;

/** What a UI shows of an unfinished operation: its next look, its queue, its expected end. */
export type Progress = Schemas["Progress"];

/** An operation's view, as the document describes it (with `progress` while unfinished). */
export type OperationView = Schemas["OperationView"];

/** An RFC 9457 problem document, with the members a route adds (`phase`, `delivery_state`, ...). */
export type Problem = Schemas["Problem"] & { [member: string]: unknown };

// ---------------------------------------------------------------------------
// Lifecycle events (docs/events.md, docs/events.schema.json), as POSTed to
// webhook receivers.

export type CaseReason = Schemas["CaseReason"];
export interface RemoteErrorSummary {
  kind: string;
  status?: number;
  detail: string;
}
interface Envelope<T extends string, D> {
  /** `<operation_id>:<incarnation>:<version>:<type>`: deduplicate on it (it is also `webhook-id`). */
  id: string;
  type: T;
  time: string;
  tenant_id: string;
  operation_id: string;
  operation_key: string;
  phase: Phase;
  delivery_state: DeliveryState;
  version: number;
  data: D;
}
export type OperationEvent =
  | Envelope<"operation.accepted", { remote_job_id: string; held_credits: number | null }>
  | Envelope<"operation.rendered", { remote_job_id: string }>
  | Envelope<
      "operation.delivered",
      {
        bucket: string | null;
        objects: { key: string; bytes: number; sha256: string; content_type: string }[];
      }
    >
  | Envelope<"operation.render_failed", { remote_job_id: string | null; error: RemoteErrorSummary | null }>
  | Envelope<"operation.rejected", { error: RemoteErrorSummary | null }>
  | Envelope<"operation.case_opened", { reason: CaseReason; opened_at: string; evidence: string }>
  | Envelope<
      "operation.case_resolved",
      {
        reason: CaseReason;
        opened_at: string;
        decision: { action: string; actor: string; reason: string; at: string } | null;
      }
    >
  | Envelope<"operation.job_attached", { remote_job_id: string; previous_remote_job_id: string | null }>
  | Envelope<"operation.held", { reason: "account_problem" | "rate_limited"; until: string | null }>
  | Envelope<
      "operation.queued",
      {
        reason: "capacity" | "spend_limit";
        since: string;
        priority: "interactive" | "batch";
        until: string | null;
      }
    >
  | Envelope<"operation.cancelled", { reason: "requested" | "deadline"; by: string; at: string }>;

/** Sent to a tenant's other enabled endpoints when one is disabled for failing. */
export interface EndpointDisabledEvent {
  id: string;
  type: "endpoint.disabled";
  time: string;
  tenant_id: string;
  data: { endpoint_id: string; url: string; failing_since: string | null; disabled_at: string };
}

export type WebhookEvent = OperationEvent | EndpointDisabledEvent;

// ---------------------------------------------------------------------------
// Errors.

/** A response the API refused or failed, or a request that never got one (`status` 0). */
export class GenaceError extends Error {
  override readonly name = "GenaceError";
  /** The HTTP status; 0 when no response came (network error or timeout). */
  readonly status: number;
  /** The problem document, when the response carried one. */
  readonly problem: Problem | null;
  /** The response's `Retry-After`, in milliseconds, when it had one. */
  readonly retryAfterMs: number | null;
  /** How many times the request was sent. */
  readonly attempts: number;

  constructor(
    message: string,
    init: { status: number; problem?: Problem | null; retryAfterMs?: number | null; attempts: number; cause?: unknown },
  ) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status;
    this.problem = init.problem ?? null;
    this.retryAfterMs = init.retryAfterMs ?? null;
    this.attempts = init.attempts;
  }

  /** The problem's type, without the service's URI prefix: `too-late-to-cancel`, `erasure-refused`, ... */
  get problemType(): string | null {
    const type = this.problem?.type;
    return typeof type === "string" ? (type.split("/").pop() ?? type) : null;
  }
}

/** `wait` reached its deadline before the operation did what was asked. */
export class WaitTimeoutError extends Error {
  override readonly name = "WaitTimeoutError";
  constructor(
    readonly lastView: OperationView,
    readonly deadline: Date,
  ) {
    super(`operation ${lastView.operation_id} still ${lastView.phase}/${lastView.delivery_state} at ${deadline.toISOString()}`);
  }
}

// ---------------------------------------------------------------------------
// Intents.

const OPERATION_KEY = /^[!-~]{1,255}$/;

/**
 * An intent whose operation key and bytes are fixed: every submission and
 * every retry sends exactly `body` with `Idempotency-Key: operationKey`.
 * Keep `body` (for example next to the work item it belongs to) to submit
 * the same intent again after a restart: see `restoreIntent`.
 */
export interface Intent {
  readonly operationKey: string;
  /** The JSON sent, byte for byte, on every attempt. */
  readonly body: string;
  /** `body`, parsed and frozen. */
  readonly request: Readonly<IntentRequest>;
}

export type IntentBody = Omit<IntentRequest, "operation_key"> & { operation_key?: string };

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object") {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

/**
 * Fixes an intent once: its operation key is `body.operation_key`, or
 * `operationKey`, or else a new random UUID minted here, once.
 */
export function newIntent(body: IntentBody, options: { operationKey?: string } = {}): Intent {
  const given = body.operation_key ?? undefined;
  if (given !== undefined && options.operationKey !== undefined && given !== options.operationKey) {
    throw new TypeError("newIntent: body.operation_key and operationKey differ");
  }
  const operationKey = given ?? options.operationKey ?? globalThis.crypto.randomUUID();
  return restoreIntent(JSON.stringify({ ...body, operation_key: operationKey }));
}

/** The intent whose `body` was kept: submitting it again is a replay of the first. */
export function restoreIntent(body: string): Intent {
  const request = JSON.parse(body) as IntentRequest;
  if (request === null || typeof request !== "object" || typeof request.operation_key !== "string") {
    throw new TypeError("restoreIntent: the body has no operation_key");
  }
  if (!OPERATION_KEY.test(request.operation_key)) {
    throw new TypeError("the operation key must be 1-255 visible ASCII characters");
  }
  return Object.freeze({ operationKey: request.operation_key, body, request: deepFreeze(request) });
}

/** What a submission did. */
export type SubmitOutcome =
  /** 202: the intent is recorded now, as a new operation. */
  | { kind: "created"; operation: OperationView; location: string | null; attempts: number }
  /** 200 with `Idempotent-Replayed: true`: the same intent was recorded before (maybe by an earlier attempt of this call); this is that operation. */
  | { kind: "replayed"; operation: OperationView; location: string | null; attempts: number }
  /** 409 `operation-key-reused`: the key belongs to a different intent, the operation `operationId`. Nothing was recorded. */
  | { kind: "key_reused"; operationId: string; problem: Problem; attempts: number }
  /** Any other 4xx: the intent was not recorded (invalid, unauthorised, too large...). */
  | { kind: "refused"; status: number; problem: Problem; attempts: number };

// ---------------------------------------------------------------------------
// Client options.

export interface RetryOptions {
  /** How many times a request may be sent in all (default 5). */
  attempts?: number;
  /** The first backoff, in milliseconds (default 250); it doubles per retry. */
  baseMs?: number;
  /** The longest backoff, in milliseconds (default 10,000). A `Retry-After` may ask for longer. */
  maxMs?: number;
  /** A `Retry-After` longer than this (default 60,000 ms) is not waited for: the error is thrown with `retryAfterMs`. */
  maxRetryAfterMs?: number;
}

export interface GenaceClientOptions {
  /** The API's base URL, such as `https://abc.execute-api.us-east-1.amazonaws.com`. */
  baseUrl: string;
  /** The bearer token, or a function that returns the current one (called per request). */
  token: string | (() => string | Promise<string>);
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof globalThis.fetch;
  retry?: RetryOptions;
  /** A W3C `traceparent` for each request (called per attempt); nothing is sent when it returns undefined. */
  traceparent?: () => string | undefined;
  /** How long one attempt may wait for its response (default 30,000 ms); past it, the attempt counts as a network error. */
  timeoutMs?: number;
}

export interface CallOptions {
  /** Aborts the call, its retries and its waits. */
  signal?: AbortSignal;
}

export interface TenantOption extends CallOptions {
  /** For an operator: the tenant whose endpoints these are. */
  tenant?: string;
}

/** An operation as read, with its version and the service's suggestion of when to look again. */
export interface OperationRead {
  operation: OperationView;
  /** The `ETag` header as sent (quoted), for `If-Match`. */
  etag: string | null;
  /** The version the ETag names (else the view's `version`). */
  version: number | null;
  /** When the service suggests reading it again: `Next-Look-In` or `progress.next_look_at`; null when it suggests nothing. */
  nextLook: { at: Date; source: "next-look-in" | "progress" } | null;
}

export interface WaitOptions extends CallOptions {
  /** The phases to wait for, or a test of the view (default: `isFinished`). */
  until?: readonly Phase[] | ((view: OperationView) => boolean);
  /** When to give up: a time, or milliseconds from now. */
  deadline: Date | number;
}

/** A listing that follows `next_cursor`: iterate it for the items, or `pages()` for the pages. */
export interface Paged<T, P> extends AsyncIterable<T> {
  pages(): AsyncIterable<P>;
}

/** Phases after which nothing more happens to an operation without a person. */
export const FINAL_PHASES: readonly Phase[] = Object.freeze([
  "rendered",
  "render_failed",
  "submit_failed",
  "rejected",
  "abandoned",
  "cancelled",
]);

/** True once nothing more happens on its own: a final phase and, for a rendered operation, its delivery over. */
export function isFinished(view: OperationView): boolean {
  if (!FINAL_PHASES.includes(view.phase)) return false;
  if (view.phase !== "rendered") return true;
  return view.delivery_state === "delivered" || view.delivery_state === "delivery_failed";
}

// ---------------------------------------------------------------------------
// The route table: one row per operation of the OpenAPI document.
//
// `idempotent` rows are retried after network errors, 5xx and 429: sending
// them twice does what sending them once does. The others (a second
// endpoint, a second rotation, a second replay...) are retried only when the
// request was certainly not acted on: a 429, or a connection never made.

type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
interface Route {
  method: Method;
  path: string;
  idempotent: boolean;
}

const ROUTES: { readonly [K in OperationName]: Route } = {
  createOperation: { method: "POST", path: "/v1/operations", idempotent: true }, // by its operation key
  listOperations: { method: "GET", path: "/v1/operations", idempotent: true },
  getOperation: { method: "GET", path: "/v1/operations/{operation_id}", idempotent: true },
  readOperationTrace: { method: "GET", path: "/v1/operations/{operation_id}/trace", idempotent: true },
  cancelOperation: { method: "POST", path: "/v1/operations/{operation_id}/cancel", idempotent: true }, // a repeat answers the same
  eraseOutputs: { method: "DELETE", path: "/v1/operations/{operation_id}/outputs", idempotent: true },
  resolveOperation: { method: "POST", path: "/v1/operations/{operation_id}/resolution", idempotent: false },
  listCases: { method: "GET", path: "/v1/reconciliation-cases", idempotent: true },
  countCases: { method: "GET", path: "/v1/reconciliation-cases/counts", idempotent: true },
  getMyCredits: { method: "GET", path: "/v1/tenants/me/credits", idempotent: true },
  listCredits: { method: "GET", path: "/v1/credits", idempotent: true },
  getCapacity: { method: "GET", path: "/v1/capacity", idempotent: true },
  setAccountLimit: { method: "PUT", path: "/v1/capacity", idempotent: true },
  setSpendLimit: { method: "PUT", path: "/v1/tenants/{tenant_id}/spend-limit", idempotent: true },
  setMaxInFlight: { method: "PUT", path: "/v1/tenants/{tenant_id}/max-in-flight", idempotent: true },
  getWebhook: { method: "GET", path: "/v1/tenants/{tenant_id}/webhook", idempotent: true },
  setWebhook: { method: "PUT", path: "/v1/tenants/{tenant_id}/webhook", idempotent: true },
  removeWebhook: { method: "DELETE", path: "/v1/tenants/{tenant_id}/webhook", idempotent: true },
  listWebhookEndpoints: { method: "GET", path: "/v1/webhooks/endpoints", idempotent: true },
  createWebhookEndpoint: { method: "POST", path: "/v1/webhooks/endpoints", idempotent: false },
  getWebhookEndpoint: { method: "GET", path: "/v1/webhooks/endpoints/{endpoint_id}", idempotent: true },
  updateWebhookEndpoint: { method: "PATCH", path: "/v1/webhooks/endpoints/{endpoint_id}", idempotent: true }, // sets members
  deleteWebhookEndpoint: { method: "DELETE", path: "/v1/webhooks/endpoints/{endpoint_id}", idempotent: true },
  rotateWebhookEndpointSecret: { method: "POST", path: "/v1/webhooks/endpoints/{endpoint_id}/rotate", idempotent: false },
  listWebhookEndpointAttempts: { method: "GET", path: "/v1/webhooks/endpoints/{endpoint_id}/attempts", idempotent: true },
  replayWebhookEvent: { method: "POST", path: "/v1/webhooks/endpoints/{endpoint_id}/replay", idempotent: false },
  recoverWebhookEvents: { method: "POST", path: "/v1/webhooks/endpoints/{endpoint_id}/recover", idempotent: false },
};

// ---------------------------------------------------------------------------
// Helpers.

type QueryValue = string | number | boolean | null | undefined;

interface Sent {
  response: Response;
  attempts: number;
}

/** Errors from a connection that was never made: nothing was sent. */
const NOT_SENT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

function errorCode(error: unknown): string | undefined {
  for (let e: unknown = error, depth = 0; e && typeof e === "object" && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** `Retry-After` in milliseconds: delay-seconds or an HTTP date. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | null {
  if (value === null) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** The version an ETag names: `"7"` or `W/"7"`. */
function etagVersion(etag: string | null): number | null {
  const m = etag === null ? null : /^(?:W\/)?"(\d+)"$/.exec(etag.trim());
  return m?.[1] === undefined ? null : Number(m[1]);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

async function readProblem(response: Response): Promise<Problem> {
  const text = await response.text().catch(() => "");
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
      const p = parsed as Partial<Problem>;
      return {
        ...p,
        type: typeof p.type === "string" ? p.type : "about:blank",
        title: typeof p.title === "string" ? p.title : response.statusText,
        status: typeof p.status === "number" ? p.status : response.status,
        detail: typeof p.detail === "string" ? p.detail : "",
      } as Problem;
    }
  } catch {
    // not JSON: described below
  }
  return { type: "about:blank", title: response.statusText, status: response.status, detail: text.slice(0, 2000) };
}

function problemTypeIs(problem: Problem, name: string): boolean {
  return typeof problem.type === "string" && problem.type.endsWith(`/${name}`);
}

// ---------------------------------------------------------------------------
// The client.

export class GenaceClient {
  readonly #base: string;
  readonly #token: GenaceClientOptions["token"];
  readonly #fetch: typeof globalThis.fetch;
  readonly #retry: Required<RetryOptions>;
  readonly #traceparent: (() => string | undefined) | undefined;
  readonly #timeoutMs: number;

  constructor(options: GenaceClientOptions) {
    this.#base = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#retry = {
      attempts: Math.max(1, Math.floor(options.retry?.attempts ?? 5)),
      baseMs: Math.max(0, options.retry?.baseMs ?? 250),
      maxMs: Math.max(0, options.retry?.maxMs ?? 10_000),
      maxRetryAfterMs: Math.max(0, options.retry?.maxRetryAfterMs ?? 60_000),
    };
    this.#traceparent = options.traceparent;
    this.#timeoutMs = options.timeoutMs ?? 30_000;
  }

  /** The wait before retry number `retry` (0 for the first): exponential, with jitter, at least `Retry-After`. */
  #backoff(retry: number, retryAfterMs: number | null): number {
    const ceiling = Math.min(this.#retry.maxMs, this.#retry.baseMs * 2 ** retry);
    const jittered = ceiling / 2 + Math.random() * (ceiling / 2);
    return Math.max(jittered, retryAfterMs ?? 0);
  }

  #url(route: Route, path: Record<string, string>, query: Record<string, QueryValue> | undefined): string {
    const filled = route.path.replace(/\{(\w+)\}/g, (_, name: string) => {
      const value = path[name];
      if (value === undefined) throw new TypeError(`missing path parameter ${name}`);
      return encodeURIComponent(value);
    });
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) params.set(name, String(value));
    }
    const qs = params.toString();
    return `${this.#base}${filled}${qs ? `?${qs}` : ""}`;
  }

  /**
   * Sends one request, retrying as its route allows, and returns the last
   * response (any status). Throws GenaceError (status 0) when no response
   * came, or the caller's abort reason.
   */
  async #send(
    operation: OperationName,
    init: {
      path?: Record<string, string>;
      query?: Record<string, QueryValue>;
      body?: string;
      headers?: Record<string, string>;
      signal?: AbortSignal | undefined;
    },
  ): Promise<Sent> {
    const route = ROUTES[operation];
    const url = this.#url(route, init.path ?? {}, init.query);
    const { attempts: most, maxRetryAfterMs } = this.#retry;
    for (let attempt = 1; ; attempt++) {
      const headers: Record<string, string> = {
        accept: "application/json, application/problem+json",
        ...init.headers,
      };
      const token = typeof this.#token === "function" ? await this.#token() : this.#token;
      headers.authorization = `Bearer ${token}`;
      if (init.body !== undefined) headers["content-type"] = "application/json";
      const traceparent = this.#traceparent?.();
      if (traceparent) headers.traceparent = traceparent;

      const timeout = AbortSignal.timeout(this.#timeoutMs);
      const signal = init.signal ? AbortSignal.any([init.signal, timeout]) : timeout;
      let response: Response;
      try {
        response = await this.#fetch(url, { method: route.method, headers, body: init.body ?? null, signal });
      } catch (error) {
        if (init.signal?.aborted) throw init.signal.reason;
        const notSent = NOT_SENT_CODES.has(errorCode(error) ?? "");
        if (attempt < most && (route.idempotent || notSent)) {
          await sleep(this.#backoff(attempt - 1, null), init.signal);
          continue;
        }
        const what = timeout.aborted ? `no answer within ${this.#timeoutMs} ms` : String(error);
        throw new GenaceError(`${route.method} ${route.path}: ${what}`, { status: 0, attempts: attempt, cause: error });
      }

      const status = response.status;
      const retryable = status === 429 || (status >= 500 && route.idempotent);
      if (!retryable || attempt >= most) return { response, attempts: attempt };
      const retryAfterMs = parseRetryAfter(response.headers.get("retry-after"));
      if (retryAfterMs !== null && retryAfterMs > maxRetryAfterMs) return { response, attempts: attempt };
      await response.body?.cancel().catch(() => undefined);
      await sleep(this.#backoff(attempt - 1, retryAfterMs), init.signal);
    }
  }

  /** The JSON body of a 2xx response; else throws GenaceError with the problem. */
  async #expect<T>(sent: Sent, ok: readonly number[], what: string): Promise<T> {
    const { response } = sent;
    if (ok.includes(response.status)) {
      if (response.status === 204) return undefined as T;
      return (await response.json()) as T;
    }
    throw await this.#error(sent, what);
  }

  async #error({ response, attempts }: Sent, what: string): Promise<GenaceError> {
    const problem = await readProblem(response);
    return new GenaceError(`${what}: ${response.status} ${problem.title}${problem.detail ? `: ${problem.detail}` : ""}`, {
      status: response.status,
      problem,
      retryAfterMs: parseRetryAfter(response.headers.get("retry-after")),
      attempts,
    });
  }

  #json(body: unknown): string {
    return JSON.stringify(body);
  }

  #paged<T, P extends { next_cursor?: string | null }>(
    fetchPage: (cursor: string | undefined) => Promise<P>,
    items: (page: P) => readonly T[],
  ): Paged<T, P> {
    async function* pages(): AsyncGenerator<P> {
      let cursor: string | undefined;
      do {
        const page = await fetchPage(cursor);
        yield page;
        cursor = page.next_cursor ?? undefined;
      } while (cursor !== undefined);
    }
    return {
      pages,
      async *[Symbol.asyncIterator]() {
        for await (const page of pages()) yield* items(page);
      },
    };
  }

  // ----- operations --------------------------------------------------------

  /**
   * Records an intent: at most one operation, and so at most one paid job,
   * however often it is sent. Every attempt sends the intent's bytes and key
   * unchanged; network errors, 5xx and 429 are retried. A 5xx or 429 on the
   * last attempt, or no answer at all, throws GenaceError: the intent may or
   * may not be recorded, and submitting the same intent again finds out.
   */
  async submit(intent: Intent, options: CallOptions = {}): Promise<SubmitOutcome> {
    const sent = await this.#send("createOperation", {
      body: intent.body,
      headers: { "idempotency-key": intent.operationKey },
      signal: options.signal,
    });
    const { response, attempts } = sent;
    const location = response.headers.get("location");
    if (response.status === 202) {
      const operation = (await response.json()) as JsonResponse<"createOperation", 202>;
      return { kind: "created", operation, location, attempts };
    }
    if (response.status === 200) {
      // The document promises `Idempotent-Replayed: true` with every 200.
      const operation = (await response.json()) as JsonResponse<"createOperation", 200>;
      return { kind: "replayed", operation, location, attempts };
    }
    if (response.status >= 400 && response.status < 500 && response.status !== 429) {
      const problem = await readProblem(response);
      if (response.status === 409 && problemTypeIs(problem, "operation-key-reused") && typeof problem.operation_id === "string") {
        return { kind: "key_reused", operationId: problem.operation_id, problem, attempts };
      }
      return { kind: "refused", status: response.status, problem, attempts };
    }
    throw await this.#error(sent, `submit ${intent.operationKey}`);
  }

  /** Reads an operation, its version and when the service suggests reading it again. */
  async getOperation(operationId: string, options: CallOptions = {}): Promise<OperationRead> {
    const sent = await this.#send("getOperation", { path: { operation_id: operationId }, signal: options.signal });
    const operation = await this.#expect<JsonResponse<"getOperation", 200>>(sent, [200], `read ${operationId}`);
    return this.#read(sent.response, operation);
  }

  #read(response: Response, operation: OperationView): OperationRead {
    const etag = response.headers.get("etag");
    let nextLook: OperationRead["nextLook"] = null;
    const header = response.headers.get("next-look-in");
    if (header !== null && /^\d+$/.test(header.trim())) {
      nextLook = { at: new Date(Date.now() + Number(header.trim()) * 1000), source: "next-look-in" };
    } else if (typeof operation.progress?.next_look_at === "string") {
      const at = Date.parse(operation.progress.next_look_at);
      if (!Number.isNaN(at)) nextLook = { at: new Date(at), source: "progress" };
    }
    return { operation, etag, version: etagVersion(etag) ?? operation.version ?? null, nextLook };
  }

  /** The caller's operations, newest first (an operator: one tenant's with `tenant`, or all in scope). */
  listOperations(filter: OperationFilter = {}, options: CallOptions = {}): Paged<OperationView, JsonResponse<"listOperations", 200>> {
    return this.#paged(
      async (cursor) =>
        this.#expect<JsonResponse<"listOperations", 200>>(
          await this.#send("listOperations", { query: { ...filter, cursor }, signal: options.signal }),
          [200],
          "list operations",
        ),
      (page) => page.operations,
    );
  }

  /**
   * Reads the operation until `until` holds, waiting between reads as the
   * service suggests (`Next-Look-In`, else `progress.next_look_at`, else a
   * backoff from 1 s to 10 s). Throws WaitTimeoutError with the last view
   * once the deadline passes.
   */
  async wait(operationId: string, options: WaitOptions): Promise<OperationView> {
    const deadline = options.deadline instanceof Date ? options.deadline : new Date(Date.now() + options.deadline);
    const until = options.until ?? isFinished;
    const holds = typeof until === "function" ? until : (view: OperationView) => until.includes(view.phase);
    let backoffMs = 1000;
    for (;;) {
      const read = await this.getOperation(operationId, { signal: options.signal });
      if (holds(read.operation)) return read.operation;
      const remaining = deadline.getTime() - Date.now();
      if (remaining <= 0) throw new WaitTimeoutError(read.operation, deadline);
      let delay = read.nextLook ? read.nextLook.at.getTime() - Date.now() : 0;
      if (delay <= 0) {
        // No suggestion, or one already past: back off.
        delay = backoffMs;
        backoffMs = Math.min(10_000, backoffMs * 2);
      }
      await sleep(Math.min(delay, remaining), options.signal);
    }
  }

  /** Takes the operation back before its dispatch claim. Throws GenaceError 409 `too-late-to-cancel` once a job may exist. */
  async cancel(operationId: string, options: CallOptions = {}): Promise<OperationRead> {
    const sent = await this.#send("cancelOperation", { path: { operation_id: operationId }, signal: options.signal });
    const operation = await this.#expect<JsonResponse<"cancelOperation", 200>>(sent, [200], `cancel ${operationId}`);
    return this.#read(sent.response, operation);
  }

  /**
   * Erases the operation's stored outputs. Throws GenaceError 409
   * `erasure-refused` while a delivery may still run. `ifMatch` is sent as
   * `If-Match` (a version or an ETag); the service does not check it on this
   * route today.
   */
  async eraseOutputs(operationId: string, options: CallOptions & { ifMatch?: number | string } = {}): Promise<OperationRead> {
    const headers: Record<string, string> = {};
    if (options.ifMatch !== undefined) headers["if-match"] = ifMatchValue(options.ifMatch);
    const sent = await this.#send("eraseOutputs", { path: { operation_id: operationId }, headers, signal: options.signal });
    const operation = await this.#expect<JsonResponse<"eraseOutputs", 200>>(sent, [200], `erase outputs of ${operationId}`);
    return this.#read(sent.response, operation);
  }

  /** Operators: the operation's trace. */
  async trace(operationId: string, options: CallOptions = {}): Promise<OperationTrace> {
    return this.#expect(
      await this.#send("readOperationTrace", { path: { operation_id: operationId }, signal: options.signal }),
      [200],
      `trace of ${operationId}`,
    );
  }

  /**
   * Operators: decides an operation's case, on the version read
   * (`ifMatch`: the view's version or its ETag). Not retried once sent: a
   * repeat would be refused with 412.
   */
  async resolve(
    operationId: string,
    decision: ResolutionRequest,
    options: CallOptions & { ifMatch: number | string },
  ): Promise<OperationRead> {
    const sent = await this.#send("resolveOperation", {
      path: { operation_id: operationId },
      headers: { "if-match": ifMatchValue(options.ifMatch) },
      body: this.#json(decision),
      signal: options.signal,
    });
    const operation = await this.#expect<JsonResponse<"resolveOperation", 200>>(sent, [200], `resolve ${operationId}`);
    return this.#read(sent.response, operation);
  }

  // ----- credits and capacity -----------------------------------------------

  /** The caller's tenant's credits. */
  async myCredits(options: CallOptions = {}): Promise<TenantCredits> {
    return this.#expect(await this.#send("getMyCredits", { signal: options.signal }), [200], "credits");
  }

  /** Operators: every tenant's credits in scope. */
  credits(filter: { limit?: number } = {}, options: CallOptions = {}): Paged<TenantCredits, CreditsPage> {
    return this.#paged(
      async (cursor) =>
        this.#expect<CreditsPage>(
          await this.#send("listCredits", { query: { ...filter, cursor }, signal: options.signal }),
          [200],
          "list credits",
        ),
      (page) => page.tenants,
    );
  }

  /** Operators: the Genace account's capacity. */
  async capacity(options: CallOptions = {}): Promise<Capacity> {
    return this.#expect(await this.#send("getCapacity", { signal: options.signal }), [200], "capacity");
  }

  /** Operators of every tenant: the account's limit of jobs in flight (null: the deployment's). */
  async setAccountLimit(maxInFlight: number | null, options: CallOptions = {}): Promise<Capacity> {
    const body: JsonRequest<"setAccountLimit"> = { max_in_flight: maxInFlight };
    return this.#expect(
      await this.#send("setAccountLimit", { body: this.#json(body), signal: options.signal }),
      [200],
      "set the account's limit",
    );
  }

  /** Operators of every tenant: a tenant's spend limit in credits (null removes it). */
  async setSpendLimit(tenantId: string, spendLimit: number | null, options: CallOptions = {}): Promise<TenantCredits> {
    const body: JsonRequest<"setSpendLimit"> = { spend_limit: spendLimit };
    return this.#expect(
      await this.#send("setSpendLimit", { path: { tenant_id: tenantId }, body: this.#json(body), signal: options.signal }),
      [200],
      `set ${tenantId}'s spend limit`,
    );
  }

  /** Operators of every tenant: a tenant's own limit of jobs in flight (null removes it). */
  async setMaxInFlight(tenantId: string, maxInFlight: number | null, options: CallOptions = {}): Promise<TenantSlots> {
    const body: JsonRequest<"setMaxInFlight"> = { max_in_flight: maxInFlight };
    return this.#expect(
      await this.#send("setMaxInFlight", { path: { tenant_id: tenantId }, body: this.#json(body), signal: options.signal }),
      [200],
      `set ${tenantId}'s jobs in flight`,
    );
  }

  // ----- reconciliation cases (operators) -----------------------------------

  /** Operators: open reconciliation cases, oldest first. */
  cases(filter: CaseFilter = {}, options: CallOptions = {}): Paged<CaseSummary, JsonResponse<"listCases", 200>> {
    return this.#paged(
      async (cursor) =>
        this.#expect<JsonResponse<"listCases", 200>>(
          await this.#send("listCases", { query: { ...filter, cursor }, signal: options.signal }),
          [200],
          "list cases",
        ),
      (page) => page.cases,
    );
  }

  /** Operators: open cases per reason. */
  async caseCounts(filter: Query<"countCases"> = {}, options: CallOptions = {}): Promise<CaseCounts> {
    return this.#expect(await this.#send("countCases", { query: { ...filter }, signal: options.signal }), [200], "count cases");
  }

  // ----- the webhook an operator sets ---------------------------------------

  /** Operators: a tenant's webhook. */
  async webhook(tenantId: string, options: CallOptions = {}): Promise<WebhookView> {
    return this.#expect(
      await this.#send("getWebhook", { path: { tenant_id: tenantId }, signal: options.signal }),
      [200],
      `${tenantId}'s webhook`,
    );
  }

  /** Operators: sets a tenant's webhook. */
  async setWebhook(tenantId: string, webhook: WebhookRequest, options: CallOptions = {}): Promise<WebhookView> {
    return this.#expect(
      await this.#send("setWebhook", { path: { tenant_id: tenantId }, body: this.#json(webhook), signal: options.signal }),
      [200],
      `set ${tenantId}'s webhook`,
    );
  }

  /** Operators: removes a tenant's webhook. */
  async removeWebhook(tenantId: string, options: CallOptions = {}): Promise<WebhookView> {
    return this.#expect(
      await this.#send("removeWebhook", { path: { tenant_id: tenantId }, signal: options.signal }),
      [200],
      `remove ${tenantId}'s webhook`,
    );
  }

  // ----- webhook endpoints --------------------------------------------------

  /** A new endpoint with its secret (shown in this answer only). Not retried once sent: a repeat makes a second endpoint. */
  async createEndpoint(endpoint: EndpointRequest, options: TenantOption = {}): Promise<EndpointWithSecret> {
    return this.#expect(
      await this.#send("createWebhookEndpoint", {
        query: { tenant: options.tenant },
        body: this.#json(endpoint),
        signal: options.signal,
      }),
      [201],
      "create an endpoint",
    );
  }

  /** The tenant's endpoints (never their secrets). */
  async endpoints(options: TenantOption = {}): Promise<Endpoint[]> {
    const list = await this.#expect<JsonResponse<"listWebhookEndpoints", 200>>(
      await this.#send("listWebhookEndpoints", { query: { tenant: options.tenant }, signal: options.signal }),
      [200],
      "list endpoints",
    );
    return list.endpoints;
  }

  async endpoint(endpointId: string, options: TenantOption = {}): Promise<Endpoint> {
    return this.#expect(
      await this.#send("getWebhookEndpoint", {
        path: { endpoint_id: endpointId },
        query: { tenant: options.tenant },
        signal: options.signal,
      }),
      [200],
      `endpoint ${endpointId}`,
    );
  }

  async updateEndpoint(endpointId: string, update: EndpointUpdate, options: TenantOption = {}): Promise<Endpoint> {
    return this.#expect(
      await this.#send("updateWebhookEndpoint", {
        path: { endpoint_id: endpointId },
        query: { tenant: options.tenant },
        body: this.#json(update),
        signal: options.signal,
      }),
      [200],
      `update endpoint ${endpointId}`,
    );
  }

  /** Deletes an endpoint and its secret. A 404 on a retry (the first attempt's answer lost) counts as deleted. */
  async deleteEndpoint(endpointId: string, options: TenantOption = {}): Promise<void> {
    const sent = await this.#send("deleteWebhookEndpoint", {
      path: { endpoint_id: endpointId },
      query: { tenant: options.tenant },
      signal: options.signal,
    });
    if (sent.response.status === 404 && sent.attempts > 1) {
      await sent.response.body?.cancel().catch(() => undefined);
      return;
    }
    await this.#expect<void>(sent, [204], `delete endpoint ${endpointId}`);
  }

  /** A new secret (shown in this answer only); the old one signs beside it for the overlap. Not retried once sent. */
  async rotateEndpointSecret(endpointId: string, options: TenantOption = {}): Promise<EndpointWithSecret> {
    return this.#expect(
      await this.#send("rotateWebhookEndpointSecret", {
        path: { endpoint_id: endpointId },
        query: { tenant: options.tenant },
        signal: options.signal,
      }),
      [200],
      `rotate endpoint ${endpointId}`,
    );
  }

  /** The endpoint's delivery log, newest first. */
  endpointAttempts(
    endpointId: string,
    filter: AttemptFilter = {},
    options: CallOptions = {},
  ): Paged<DeliveryAttempt, JsonResponse<"listWebhookEndpointAttempts", 200>> {
    return this.#paged(
      async (cursor) =>
        this.#expect<JsonResponse<"listWebhookEndpointAttempts", 200>>(
          await this.#send("listWebhookEndpointAttempts", {
            path: { endpoint_id: endpointId },
            query: { ...filter, cursor },
            signal: options.signal,
          }),
          [200],
          `attempts of endpoint ${endpointId}`,
        ),
      (page) => page.attempts,
    );
  }

  /** Sends one kept event to the endpoint again, with its original id. Not retried once sent. */
  async replayEvent(endpointId: string, eventId: string, options: TenantOption = {}): Promise<Replayed> {
    const body: JsonRequest<"replayWebhookEvent"> = { event_id: eventId };
    return this.#expect(
      await this.#send("replayWebhookEvent", {
        path: { endpoint_id: endpointId },
        query: { tenant: options.tenant },
        body: this.#json(body),
        signal: options.signal,
      }),
      [202],
      `replay ${eventId} to ${endpointId}`,
    );
  }

  /** Sends the endpoint again every event that failed or was skipped since `since`. Not retried once sent. */
  async recoverEvents(endpointId: string, since: Date | string, options: TenantOption = {}): Promise<Recovered> {
    return this.#expect(
      await this.#send("recoverWebhookEvents", {
        path: { endpoint_id: endpointId },
        query: { tenant: options.tenant, since: since instanceof Date ? since.toISOString() : since },
        signal: options.signal,
      }),
      [202],
      `recover events for ${endpointId}`,
    );
  }

  /** See the exported `verifyWebhook`. */
  verifyWebhook(secrets: readonly string[], headers: WebhookHeaders, rawBody: string | Uint8Array): WebhookEvent {
    return verifyWebhook(secrets, headers, rawBody);
  }
}

function ifMatchValue(value: number | string): string {
  return typeof value === "number" ? `"${value}"` : value;
}

// ---------------------------------------------------------------------------
// Webhook verification.

/** Request headers as fetch (`Headers`) or node:http (`IncomingHttpHeaders`) give them. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

const WEBHOOK_HEADERS = ["webhook-id", "webhook-timestamp", "webhook-signature"] as const;

/**
 * The HMAC key the service uses for a secret: a `whsec_` secret's base64
 * decoded, any other value's bytes as they are (shared/stages/src/pipeline/
 * webhooks/signature.rs).
 */
function webhookFor(secret: string): Webhook {
  const b64 = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : null;
  if (b64 !== null && b64.length > 0 && b64.length % 4 === 0 && /^[A-Za-z0-9+/]+={0,2}$/.test(b64)) {
    return new Webhook(secret);
  }
  return new Webhook(new TextEncoder().encode(secret), { format: "raw" });
}

/**
 * Verifies a webhook POST as Standard Webhooks says, under each secret in
 * turn (during a rotation, the new and the old one), and returns its event.
 * `rawBody` must be the body exactly as received. Throws
 * WebhookVerificationError when no secret verifies it (forged, tampered, or
 * a timestamp more than five minutes away).
 */
export function verifyWebhook(secrets: readonly string[], headers: WebhookHeaders, rawBody: string | Uint8Array): WebhookEvent {
  const wanted: Record<string, string> = {};
  for (const name of WEBHOOK_HEADERS) {
    let value: string | string[] | null | undefined;
    if (typeof (headers as Headers).get === "function") {
      value = (headers as Headers).get(name);
    } else {
      const record = headers as Record<string, string | string[] | undefined>;
      const key = Object.keys(record).find((k) => k.toLowerCase() === name);
      value = key === undefined ? undefined : record[key];
    }
    const text = Array.isArray(value) ? value[0] : value;
    if (typeof text === "string") wanted[name] = text;
  }
  if (secrets.length === 0) throw new WebhookVerificationError("No secret to verify with");
  let last: unknown;
  for (const secret of secrets) {
    let parsed: unknown;
    try {
      parsed = webhookFor(secret).verify(rawBody, wanted);
    } catch (error) {
      last = error;
      continue;
    }
    if (parsed === null || typeof parsed !== "object" || typeof (parsed as { type?: unknown }).type !== "string") {
      throw new WebhookVerificationError("The signed body is not an event");
    }
    return parsed as WebhookEvent;
  }
  throw last instanceof WebhookVerificationError ? last : new WebhookVerificationError(String(last));
}
