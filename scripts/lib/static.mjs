// The safe part of Pippin's two dev servers (www/serve.mjs, pkg-tests/serve.mjs):
// mapping a request to a file strictly inside a folder, and refusing requests that
// do not come from this machine's own pages.
import fs from "node:fs";
import path from "node:path";

export const TYPES = {
  ".js": "text/javascript", ".mjs": "text/javascript", ".html": "text/html; charset=utf-8", ".css": "text/css",
  ".wasm": "application/wasm", ".json": "application/json", ".svg": "image/svg+xml", ".gguf": "application/octet-stream",
};

/**
 * The headers that make a page cross-origin isolated, so that it has SharedArrayBuffer:
 * Pippin's CPU backend then runs on every core (helper workers). Every response gets
 * them: a worker's script needs its own COEP.
 */
export const ISOLATED = {
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-embedder-policy": "require-corp",
};

/** An HTTP error with its status. */
export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * The file `rel` (a URL path below a route, still percent-encoded) names inside `dir`,
 * or an HttpError: 400 for a malformed escape or a NUL, 403 for anything that resolves
 * outside `dir` (`..`, an encoded `/`, an absolute path).
 */
export function resolveInside(dir, rel) {
  let decoded;
  try {
    decoded = decodeURIComponent(rel);
  } catch {
    throw new HttpError(400, "bad request: malformed percent-encoding");
  }
  if (decoded.includes("\0")) throw new HttpError(400, "bad request: NUL in the path");
  const root = path.resolve(dir);
  const file = path.resolve(root, "." + path.sep + decoded);
  if (file !== root && !file.startsWith(root + path.sep)) throw new HttpError(403, "forbidden: outside the served folder");
  return file;
}

/**
 * Whether a request's Host is this machine (127.0.0.1, localhost or [::1], any port):
 * a page on another site that rebinds its DNS name to 127.0.0.1 sends its own name.
 */
export function localHost(req) {
  const host = String(req.headers.host ?? "");
  return /^(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$/i.test(host);
}

/** Sends `file` (200), or a 404 when it is not a regular file; read errors end the response. */
export function sendFile(res, file, extraHeaders = {}) {
  fs.stat(file, (err, st) => {
    if (err || !st.isFile()) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    res.writeHead(200, {
      "content-type": TYPES[path.extname(file)] ?? "application/octet-stream",
      "content-length": st.size,
      ...extraHeaders,
    });
    fs.createReadStream(file)
      .on("error", () => res.destroy())
      .pipe(res);
  });
}

/** Answers an error (HttpError or anything thrown) without taking the server down. */
export function sendError(res, e) {
  const status = e instanceof HttpError ? e.status : 500;
  if (!res.headersSent) res.writeHead(status, { "content-type": "text/plain" });
  res.end(e instanceof HttpError ? e.message : "internal error");
}
