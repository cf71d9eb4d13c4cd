// A static file server for the browser tests, on 127.0.0.1 only: the repository root
// (pkg/, pkg-tests/, models/), cross-origin isolated but below /plain/, plus a few
// test-only routes for error cases. Paths stay
// inside the root and only requests to this machine are answered.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { HttpError, ISOLATED, localHost, resolveInside, sendError, sendFile } from "../scripts/lib/static.mjs";

const ROUTES = {
  // The first 20 MB of the real model: a download that stops early.
  "/test/truncated.gguf": (root, res) => {
    const file = path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": 20_000_000 });
    fs.createReadStream(file, { start: 0, end: 19_999_999 }).on("error", () => res.destroy()).pipe(res);
  },
  // An error page served with 200, as misconfigured hosts do.
  "/test/error-page.gguf": (root, res) => {
    res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><h1>Oops</h1>");
  },
};

export function serve(root) {
  const server = http.createServer((req, res) => {
    try {
      if (!localHost(req)) throw new HttpError(403, "forbidden: only requests to 127.0.0.1 or localhost");
      let raw = String(req.url ?? "/").split("?")[0].split("#")[0];
      const route = ROUTES[raw];
      if (route) return route(root, res);
      // Pages are cross-origin isolated (the CPU backend's threads), except below
      // /plain/: a site that does not send the headers.
      const plain = raw.startsWith("/plain/");
      if (plain) raw = raw.slice("/plain".length);
      sendFile(res, resolveInside(root, raw), plain ? {} : ISOLATED);
    } catch (e) {
      sendError(res, e);
    }
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}
