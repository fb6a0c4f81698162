// The example of docs/clients.md, run by test/quickstart.test.mjs against
// the local stack.

// [quickstart]
import { GenaceClient, newIntent, verifyWebhook } from "../dist/index.js"; // an application: "@genace/operations-client"

/** Submits one intent, waits for its outputs, and returns its view. */
export async function quickstart({ baseUrl, token, key }) {
  const genace = new GenaceClient({ baseUrl, token });
  const intent = newIntent({ media_type: "image", specification: { model: "genace-image-1", prompt: "a lighthouse at dusk" } }, { operationKey: key });
  const outcome = await genace.submit(intent); // keep `intent`: a retry resends exactly it
  if (outcome.kind !== "created" && outcome.kind !== "replayed") throw new Error(`not taken: ${outcome.kind}`);
  return genace.wait(outcome.operation.operation_id, { until: (view) => view.delivery_state === "delivered", deadline: 600_000 });
}

/** In the webhook receiver: the event, if the delivery verifies under either secret. */
export function onWebhook(headers, rawBody, secrets) {
  try { return verifyWebhook(secrets, headers, rawBody); } catch { return undefined; }
}
// [/quickstart]
