// Retries against the real stack, through node:http servers on loopback in
// front of it: a first answer lost on the way back, a 429 with Retry-After,
// and the traceparent sent on every attempt.
import assert from "node:assert/strict";
import { test } from "node:test";

import { GenaceClient, GenaceError, newIntent, parseRetryAfter } from "../dist/index.js";
import { API_URL, RUN, TENANT_TOKEN, client, forward, readBody, reply, serve, spec } from "./helpers.mjs";

test("a lost first answer: the retry comes back replayed, and there is one operation", async () => {
  const posts = [];
  const proxy = await serve(async (req, res) => {
    const body = await readBody(req);
    const answer = await forward(req, body);
    if (req.method === "POST" && req.url === "/v1/operations") {
      posts.push({ body: body.toString("utf8"), key: req.headers["idempotency-key"], status: answer.status });
      if (posts.length === 1) {
        // The API recorded it; the client never hears so.
        res.writeHead(503, { "content-type": "application/problem+json" });
        res.end(JSON.stringify({ type: "about:blank", title: "Service Unavailable", status: 503, detail: "lost" }));
        return;
      }
    }
    reply(res, answer);
  });
  try {
    const viaProxy = new GenaceClient({ baseUrl: proxy.url, token: TENANT_TOKEN, retry: { attempts: 3, baseMs: 20, maxMs: 100 } });
    const prefix = `lost-${RUN}/`;
    const intent = newIntent(spec("the answer is lost"), { operationKey: `${prefix}1` });
    const outcome = await viaProxy.submit(intent);
    assert.equal(outcome.kind, "replayed");
    assert.equal(outcome.attempts, 2);
    assert.equal(posts.length, 2);
    assert.deepEqual(posts.map((p) => p.status), [202, 200]);
    assert.equal(posts[0].body, posts[1].body, "the retry sends the same bytes");
    assert.equal(posts[0].body, intent.body);
    assert.equal(posts[0].key, intent.operationKey);
    assert.equal(posts[1].key, intent.operationKey);
    const listed = [];
    for await (const view of client().listOperations({ key_prefix: prefix })) listed.push(view.operation_id);
    assert.deepEqual(listed, [outcome.operation.operation_id]);
  } finally {
    await proxy.close();
  }
});

test("a 429 with Retry-After: 1 is retried no sooner than a second later", async () => {
  const arrivals = [];
  const server = await serve(async (req, res) => {
    const body = await readBody(req);
    arrivals.push({ at: performance.now(), traceparent: req.headers.traceparent });
    if (arrivals.length === 1) {
      res.writeHead(429, { "retry-after": "1", "content-type": "application/problem+json" });
      res.end(JSON.stringify({ type: "about:blank", title: "Too Many Requests", status: 429, detail: "slow down" }));
      return;
    }
    reply(res, await forward(req, body));
  });
  try {
    let n = 0;
    const c = new GenaceClient({
      baseUrl: server.url,
      token: TENANT_TOKEN,
      retry: { attempts: 3, baseMs: 1, maxMs: 5 },
      traceparent: () => `00-${"4bf92f3577b34da6a3ce929d0e0e4736"}-${(++n).toString(16).padStart(16, "0")}-01`,
    });
    const outcome = await c.submit(newIntent(spec("after a 429"), { operationKey: `retry-after-${RUN}` }));
    assert.equal(outcome.kind, "created");
    assert.equal(outcome.attempts, 2);
    assert.equal(arrivals.length, 2);
    const gap = arrivals[1].at - arrivals[0].at;
    assert.ok(gap >= 1000, `retried after ${gap.toFixed(0)} ms`);
    assert.ok(gap < 2000, `retried after ${gap.toFixed(0)} ms`);
    assert.deepEqual(
      arrivals.map((a) => a.traceparent),
      ["00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000001-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000002-01"],
    );
  } finally {
    await server.close();
  }
});

test("a non-idempotent POST is not retried after a 5xx; a GET is", async () => {
  let creates = 0;
  let reads = 0;
  const server = await serve(async (req, res) => {
    await readBody(req);
    if (req.method === "POST") creates++;
    else reads++;
    res.writeHead(502, { "content-type": "application/problem+json" });
    res.end(JSON.stringify({ type: "about:blank", title: "Bad Gateway", status: 502, detail: "" }));
  });
  try {
    const c = new GenaceClient({ baseUrl: server.url, token: TENANT_TOKEN, retry: { attempts: 3, baseMs: 1, maxMs: 5 } });
    await assert.rejects(c.createEndpoint({ url: "https://hooks.example.com/x" }), (e) => e instanceof GenaceError && e.status === 502);
    assert.equal(creates, 1);
    await assert.rejects(c.myCredits(), (e) => e instanceof GenaceError && e.status === 502 && e.attempts === 3);
    assert.equal(reads, 3);
  } finally {
    await server.close();
  }
});

test("no answer at all is a GenaceError with status 0", async () => {
  const server = await serve(() => {});
  await server.close();
  const c = new GenaceClient({ baseUrl: server.url, token: TENANT_TOKEN, retry: { attempts: 2, baseMs: 1, maxMs: 5 } });
  await assert.rejects(c.myCredits(), (e) => e instanceof GenaceError && e.status === 0 && e.attempts === 2);
});

test("Retry-After in seconds or as an HTTP date", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  const now = Date.parse("2026-01-01T00:00:00Z");
  assert.equal(parseRetryAfter("Thu, 01 Jan 2026 00:00:05 GMT", now), 5000);
  assert.equal(parseRetryAfter("Wed, 31 Dec 2025 23:59:00 GMT", now), 0);
  assert.equal(parseRetryAfter("soon"), null);
  assert.ok(API_URL);
});
