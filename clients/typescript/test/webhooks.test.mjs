// A tenant's webhook endpoint on the real stack: created by the application,
// POSTed to a node:http receiver on loopback, verified with standardwebhooks.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { WebhookVerificationError, newIntent, verifyWebhook } from "../dist/index.js";
import { RUN, WEBHOOK_TOKEN, client, readBody, serve, spec } from "./helpers.mjs";

const app = client(WEBHOOK_TOKEN);
const received = [];
let waiters = [];
let receiver;
let endpoint;

before(async () => {
  receiver = await serve(async (req, res) => {
    const body = await readBody(req);
    received.push({ headers: req.headers, body });
    for (const wake of waiters) wake();
    res.writeHead(204);
    res.end();
  });
  endpoint = await app.createEndpoint({ url: `${receiver.url}/genace`, description: `client-ts ${RUN}` });
});

after(async () => {
  if (endpoint) await app.deleteEndpoint(endpoint.id);
  await receiver?.close();
});

/** The first POST that `match` accepts, within `ms`. */
async function delivery(match, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = received.find(match);
    if (found) return found;
    const left = deadline - Date.now();
    assert.ok(left > 0, `no matching webhook within ${ms} ms (${received.length} received)`);
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, left);
      waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    waiters = [];
  }
}

test("a delivered event verifies under the endpoint's secret; a tampered one does not", async () => {
  assert.match(endpoint.secret, /^whsec_/);
  const outcome = await app.submit(newIntent(spec("signed events"), { operationKey: `hook-${RUN}` }));
  assert.equal(outcome.kind, "created");
  const id = outcome.operation.operation_id;
  const post = await delivery((p) => JSON.parse(p.body.toString("utf8")).operation_id === id, 30_000);

  // Any secret of a rotation may be the one that signed.
  const other = "whsec_" + Buffer.alloc(32, 7).toString("base64");
  const event = verifyWebhook([other, endpoint.secret], post.headers, post.body);
  assert.equal(event.operation_id, id);
  assert.equal(event.id, post.headers["webhook-id"]);
  assert.ok(event.type.startsWith("operation."));
  assert.equal(event.type, post.headers["genace-event-type"]);
  // A string body verifies the same as the bytes.
  assert.equal(verifyWebhook([endpoint.secret], post.headers, post.body.toString("utf8")).id, event.id);

  const tampered = Buffer.from(post.body.toString("utf8").replace(`"version":${event.version}`, `"version":${event.version + 1}`));
  assert.notDeepEqual(tampered, post.body);
  assert.throws(() => verifyWebhook([other, endpoint.secret], post.headers, tampered), WebhookVerificationError);
  assert.throws(() => verifyWebhook([other], post.headers, post.body), WebhookVerificationError);
  assert.throws(
    () => verifyWebhook([endpoint.secret], { ...post.headers, "webhook-id": `${post.headers["webhook-id"]}x` }, post.body),
    WebhookVerificationError,
  );
});

test("the endpoint is listed and its attempts are logged", async () => {
  const listed = await app.endpoints();
  assert.ok(listed.some((e) => e.id === endpoint.id && !("secret" in e)));
  // The log entry is written once the receiver has answered.
  let attempts = [];
  for (const until = Date.now() + 10_000; Date.now() < until; await new Promise((r) => setTimeout(r, 200))) {
    attempts = [];
    for await (const attempt of app.endpointAttempts(endpoint.id, { limit: 1 })) attempts.push(attempt);
    if (attempts.some((a) => a.status === "succeeded")) break;
  }
  assert.ok(attempts.some((a) => a.status === "succeeded"), JSON.stringify(attempts));
  const updated = await app.updateEndpoint(endpoint.id, { description: "renamed" });
  assert.equal(updated.description, "renamed");
});
