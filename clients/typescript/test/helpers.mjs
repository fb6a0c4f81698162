// Shared by the tests: the stack they run against (from the environment),
// clients for it, and small node:http servers on loopback.
import assert from "node:assert/strict";
import http from "node:http";
import { randomUUID } from "node:crypto";

import { GenaceClient } from "../dist/index.js";

function required(name) {
  const value = process.env[name];
  assert.ok(value, `${name} must be set (scripts/client-ts.sh sets it)`);
  return value;
}

export const API_URL = required("GENACE_API_URL");
export const TENANT_TOKEN = required("GENACE_TENANT_TOKEN");
export const OPERATOR_TOKEN = required("GENACE_OPERATOR_TOKEN");
export const WEBHOOK_TOKEN = required("GENACE_WEBHOOK_TOKEN");

/** The tenant a token names (its tenant claim, `TENANT_CLAIM` or tenant_id). */
export function tenantOf(token) {
  const claims = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString("utf8"));
  return claims[process.env.TENANT_CLAIM ?? "tenant_id"];
}

/** Unique per run, so keys never meet those of an earlier run. */
export const RUN = randomUUID().slice(0, 8);

/** Fast retries: the tests measure what the service asks for, not the defaults. */
export function client(token = TENANT_TOKEN, options = {}) {
  return new GenaceClient({ baseUrl: API_URL, token, retry: { attempts: 4, baseMs: 20, maxMs: 200 }, ...options });
}

export function spec(prompt, extra = {}) {
  return { media_type: "image", specification: { model: "genace-image-1", prompt, ...extra } };
}

export function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

const HOP_BY_HOP = new Set(["host", "connection", "content-length", "transfer-encoding", "keep-alive"]);

/** Sends a request a test server received on to the API; returns the API's answer. */
export async function forward(req, body) {
  const headers = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (!HOP_BY_HOP.has(name) && value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  const res = await fetch(`${API_URL}${req.url}`, {
    method: req.method,
    headers,
    body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
  });
  const out = {};
  res.headers.forEach((value, name) => {
    if (!HOP_BY_HOP.has(name) && name !== "content-encoding") out[name] = value;
  });
  return { status: res.status, headers: out, body: Buffer.from(await res.arrayBuffer()) };
}

/** Writes a forwarded answer back. */
export function reply(res, answer) {
  res.writeHead(answer.status, answer.headers);
  res.end(answer.body);
}

/** A node:http server on 127.0.0.1 and a free port; `url` and `close()`. */
export async function serve(handler) {
  const server = http.createServer((req, res) => {
    Promise.resolve(handler(req, res)).catch((error) => {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end(String(error));
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
