// How `wait` paces its reads: as the service suggests (`Next-Look-In`, else
// `progress.next_look_at`, else a backoff), through a node:http proxy in
// front of the real stack that sets or strips the suggestion.
import assert from "node:assert/strict";
import { before, test } from "node:test";

import { GenaceClient, WaitTimeoutError, newIntent } from "../dist/index.js";
import { RUN, TENANT_TOKEN, client, forward, readBody, reply, serve, spec } from "./helpers.mjs";

let operationId;
before(async () => {
  const outcome = await client().submit(newIntent(spec("paced"), { operationKey: `wait-${RUN}` }));
  operationId = outcome.operation.operation_id;
});

/** A proxy that records when each read came and lets `shape` change the answer. */
async function pacedProxy(shape) {
  const reads = [];
  const proxy = await serve(async (req, res) => {
    const body = await readBody(req);
    const answer = await forward(req, body);
    if (req.method === "GET" && req.url.startsWith("/v1/operations/")) {
      reads.push(performance.now());
      shape(answer);
    }
    reply(res, answer);
  });
  const c = new GenaceClient({ baseUrl: proxy.url, token: TENANT_TOKEN });
  return { reads, proxy, c };
}

const gaps = (reads) => reads.slice(1).map((t, i) => t - reads[i]);

test("Next-Look-In sets the time of the next read", async () => {
  const { reads, proxy, c } = await pacedProxy((answer) => {
    answer.headers["next-look-in"] = "1";
  });
  try {
    const read = await c.getOperation(operationId);
    assert.equal(read.nextLook.source, "next-look-in");
    reads.length = 0;
    await assert.rejects(c.wait(operationId, { until: ["cancelled"], deadline: 3500 }), WaitTimeoutError);
    // A backoff would have waited 1 s, then 2 s; the service said 1 s each time.
    const between = gaps(reads).slice(0, -1);
    assert.ok(between.length >= 2, `reads at ${gaps(reads)}`);
    for (const gap of between) assert.ok(gap >= 950 && gap < 1500, `gaps ${gaps(reads).map(Math.round)}`);
  } finally {
    await proxy.close();
  }
});

test("progress.next_look_at sets it when there is no header", async () => {
  const { reads, proxy, c } = await pacedProxy((answer) => {
    delete answer.headers["next-look-in"];
    const view = JSON.parse(answer.body.toString("utf8"));
    view.progress = { ...view.progress, next_look_at: new Date(Date.now() + 300).toISOString() };
    answer.body = Buffer.from(JSON.stringify(view));
  });
  try {
    await assert.rejects(c.wait(operationId, { until: ["cancelled"], deadline: 1600 }), WaitTimeoutError);
    // Without it, the first wait would be a second.
    assert.ok(reads.length >= 4, `reads at ${gaps(reads).map(Math.round)}`);
    for (const gap of gaps(reads).slice(0, -1)) assert.ok(gap >= 250 && gap < 700, `gaps ${gaps(reads).map(Math.round)}`);
  } finally {
    await proxy.close();
  }
});

test("without a suggestion, reads back off from 1 s", async () => {
  const { reads, proxy, c } = await pacedProxy((answer) => {
    delete answer.headers["next-look-in"];
    const view = JSON.parse(answer.body.toString("utf8"));
    delete view.progress;
    answer.body = Buffer.from(JSON.stringify(view));
  });
  try {
    await assert.rejects(c.wait(operationId, { until: ["cancelled"], deadline: 3300 }), WaitTimeoutError);
    const [first, second] = gaps(reads);
    assert.ok(first >= 500 && first < 1300, `gaps ${gaps(reads).map(Math.round)}`);
    assert.ok(second >= 1500, `gaps ${gaps(reads).map(Math.round)}`);
  } finally {
    await proxy.close();
  }
});


test("the service itself suggests the next look of an unfinished operation", async () => {
  // Read at once: a render takes a second at least, so it is unfinished.
  const outcome = await client().submit(newIntent(spec("suggested"), { operationKey: `suggest-${RUN}` }));
  const read = await client().getOperation(outcome.operation.operation_id);
  assert.notEqual(read.operation.delivery_state, "delivered");
  assert.equal(read.nextLook?.source, "next-look-in");
  assert.ok(read.operation.progress?.next_look_at, JSON.stringify(read.operation));
  const seconds = (read.nextLook.at.getTime() - Date.now()) / 1000;
  assert.ok(seconds > 0 && seconds <= 301, `next look in ${seconds} s`);
});
