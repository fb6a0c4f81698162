// The public API, with the signed-in operator's bearer token.

export const TOKEN = "genace-console-token";
export const PAGE = 25;

export class SignedOut extends Error {}

// The claims of a token, read without checking it (the API checks it).
export function claims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part));
  } catch {
    return {};
  }
}


export async function api(method, path, { body, ifMatch } = {}) {
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
