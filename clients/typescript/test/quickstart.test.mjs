// The documented example (examples/quickstart.mjs, quoted in
// docs/clients.md) runs against the local stack as written.
import assert from "node:assert/strict";
import { test } from "node:test";

import { quickstart, onWebhook } from "../examples/quickstart.mjs";
import { API_URL, RUN, TENANT_TOKEN } from "./helpers.mjs";

test("the documented example submits, waits for the outputs and refuses an unsigned webhook", async () => {
  const view = await quickstart({ baseUrl: API_URL, token: TENANT_TOKEN, key: `quickstart-${RUN}` });
  assert.equal(view.delivery_state, "delivered");
  assert.equal(view.operation_key, `quickstart-${RUN}`);
  const unsigned = onWebhook({ "webhook-id": "msg_1", "webhook-timestamp": String(Math.floor(Date.now() / 1000)), "webhook-signature": "v1,AAAA" },
    JSON.stringify({ id: "x" }), ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
  assert.equal(unsigned, undefined);
});
