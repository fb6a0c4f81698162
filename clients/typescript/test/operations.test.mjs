// An application's intents against the real local stack: created, replayed,
// a reused key, a refusal, listing across cursors, waiting for the end,
// erasing outputs, cancelling; and the operator's reads.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { GenaceError, WaitTimeoutError, isFinished, newIntent, restoreIntent } from "../dist/index.js";
import { OPERATOR_TOKEN, RUN, TENANT_TOKEN, client, spec, tenantOf } from "./helpers.mjs";

const app = client();
const operator = client(OPERATOR_TOKEN);

describe("submit", () => {
  const intent = newIntent(spec("a lighthouse at dusk", { parameters: { seed: 7 } }), { operationKey: `ops-${RUN}/1` });
  let first;

  test("a new intent is created (202)", async () => {
    first = await app.submit(intent);
    assert.equal(first.kind, "created");
    assert.equal(first.attempts, 1);
    assert.match(first.operation.operation_id, /^op_[0-9a-f]{32}$/);
    assert.equal(first.operation.operation_key, intent.operationKey);
    assert.equal(first.location, `/v1/operations/${first.operation.operation_id}`);
  });

  test("the same intent again is replayed: the same operation", async () => {
    const again = await app.submit(intent);
    assert.equal(again.kind, "replayed");
    assert.equal(again.operation.operation_id, first.operation.operation_id);
    // As after a restart: the kept bytes are the same intent.
    const restored = await app.submit(restoreIntent(intent.body));
    assert.equal(restored.kind, "replayed");
    assert.equal(restored.operation.operation_id, first.operation.operation_id);
  });

  test("the same key with another body is key_reused, naming the existing operation", async () => {
    const other = newIntent(spec("a lighthouse at dawn"), { operationKey: intent.operationKey });
    const outcome = await app.submit(other);
    assert.equal(outcome.kind, "key_reused");
    assert.equal(outcome.operationId, first.operation.operation_id);
    assert.equal(outcome.problem.status, 409);
  });

  test("an invalid intent is refused with its problem", async () => {
    const outcome = await app.submit(newIntent({ media_type: "audio", specification: { model: "m", prompt: "p" } }));
    assert.equal(outcome.kind, "refused");
    assert.equal(outcome.status, 400);
    assert.equal(outcome.problem.status, 400);
    assert.equal(typeof outcome.problem.field, "string");
  });

  test("an intent's key is minted once and its bytes never change", () => {
    const minted = newIntent(spec("x"));
    assert.match(minted.operationKey, /^[0-9a-f-]{36}$/);
    assert.equal(JSON.parse(minted.body).operation_key, minted.operationKey);
    assert.ok(Object.isFrozen(minted) && Object.isFrozen(minted.request.specification));
    assert.throws(() => newIntent({ ...spec("x"), operation_key: "a" }, { operationKey: "b" }), TypeError);
  });

  test("wait until the operation is finished, then read its version", async () => {
    const view = await app.wait(first.operation.operation_id, { deadline: 40_000 });
    assert.ok(isFinished(view));
    assert.equal(view.phase, "rendered");
    assert.equal(view.delivery_state, "delivered");
    const read = await app.getOperation(view.operation_id);
    assert.equal(read.etag, `"${read.operation.version}"`);
    assert.equal(read.version, read.operation.version);
  });

  test("erase outputs after delivery", async () => {
    const read = await app.getOperation(first.operation.operation_id);
    const erased = await app.eraseOutputs(read.operation.operation_id, { ifMatch: read.version });
    assert.ok(erased.operation.outputs_erased_at);
    assert.ok(erased.operation.erased_objects.length >= 1);
    for (const object of erased.operation.delivered_objects ?? []) assert.equal(object.url ?? null, null);
    const again = await app.eraseOutputs(read.operation.operation_id);
    assert.equal(again.operation.outputs_erased_at, erased.operation.outputs_erased_at);
  });

  test("cancel once a job exists: GenaceError 409 too-late-to-cancel", async () => {
    await assert.rejects(app.cancel(first.operation.operation_id), (error) => {
      assert.ok(error instanceof GenaceError);
      assert.equal(error.status, 409);
      assert.equal(error.problemType, "too-late-to-cancel");
      assert.equal(error.problem.phase, "rendered");
      return true;
    });
  });

  test("a wait whose deadline passes throws with the last view", async () => {
    const started = Date.now();
    await assert.rejects(
      app.wait(first.operation.operation_id, { until: ["cancelled"], deadline: 1200 }),
      (error) => {
        assert.ok(error instanceof WaitTimeoutError);
        assert.equal(error.lastView.operation_id, first.operation.operation_id);
        return true;
      },
    );
    assert.ok(Date.now() - started < 5000);
  });

  test("an unknown operation is a GenaceError 404", async () => {
    await assert.rejects(app.getOperation(`op_${"0".repeat(32)}`), (error) => error instanceof GenaceError && error.status === 404);
  });
});

describe("list", () => {
  const prefix = `list-${RUN}/`;
  const ids = new Set();

  before(async () => {
    for (let i = 0; i < 3; i++) {
      const outcome = await app.submit(newIntent(spec(`list ${i}`), { operationKey: `${prefix}${i}` }));
      assert.equal(outcome.kind, "created");
      ids.add(outcome.operation.operation_id);
    }
  });

  test("the iterator follows next_cursor across pages", async () => {
    let pages = 0;
    let cursors = 0;
    for await (const page of app.listOperations({ key_prefix: prefix, limit: 1 }).pages()) {
      pages++;
      if (page.next_cursor) cursors++;
    }
    assert.ok(cursors >= 1, `crossed ${cursors} cursors`);
    assert.ok(pages >= 2);
    const seen = [];
    for await (const view of app.listOperations({ key_prefix: prefix, limit: 1 })) seen.push(view.operation_id);
    assert.deepEqual(new Set(seen), ids);
    assert.equal(seen.length, ids.size);
  });
});

describe("cancel", () => {
  const tenant = tenantOf(TENANT_TOKEN);

  // The tenant's spend limit 0 keeps a new intent waiting before its dispatch claim.
  before(async () => {
    const credits = await operator.setSpendLimit(tenant, 0);
    assert.equal(credits.spend_limit, 0);
  });
  after(async () => {
    await operator.setSpendLimit(tenant, null);
  });

  test("an operation taken back before its dispatch claim is cancelled", async () => {
    const submitted = await app.submit(newIntent(spec("never rendered"), { operationKey: `cancel-${RUN}` }));
    assert.equal(submitted.kind, "created");
    const id = submitted.operation.operation_id;
    const waiting = await app.wait(id, { until: (v) => v.phase === "prepared" && v.hold?.reason === "spend_limit", deadline: 10_000 });
    assert.equal(waiting.phase, "prepared");
    const cancelled = await app.cancel(id);
    assert.equal(cancelled.operation.phase, "cancelled");
    assert.equal(cancelled.operation.cancellation.reason, "requested");
    assert.ok(cancelled.version > waiting.version);
    const repeat = await app.cancel(id);
    assert.equal(repeat.operation.phase, "cancelled");
    assert.equal(repeat.version, cancelled.version);
  });
});

describe("operator", () => {
  test("capacity, credits, cases and a trace", async () => {
    const capacity = await operator.capacity();
    assert.equal(typeof capacity.tenants_complete, "boolean");
    const tenants = [];
    for await (const credits of operator.credits({ limit: 1 })) tenants.push(credits.tenant_id);
    assert.ok(tenants.includes(tenantOf(TENANT_TOKEN)));
    const counts = await operator.caseCounts();
    assert.equal(typeof counts.open, "number");
    for await (const kase of operator.cases({ limit: 5 })) assert.ok(kase.operation_id);
    const mine = await app.myCredits();
    assert.equal(mine.tenant_id, tenantOf(TENANT_TOKEN));
    const [some] = await (async () => {
      for await (const view of app.listOperations({ limit: 1 })) return [view];
      return [];
    })();
    const trace = await operator.trace(some.operation_id);
    assert.equal(trace.operation_id, some.operation_id);
    await assert.rejects(app.trace(some.operation_id), (error) => error instanceof GenaceError && error.status === 403);
  });
});
