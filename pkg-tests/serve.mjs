// A static file server for the browser tests, on 127.0.0.1 only: the repository root
// (pkg/, pkg-tests/, models/), cross-origin isolated but below /plain/, plus a few
// test-only routes for error cases. Paths stay
// inside the root and only requests to this machine are answered.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { HttpError, ISOLATED, localHost, resolveInside, sendError, sendFile } from "../scripts/lib/static.mjs";

/** Requests seen by /test/flaky.gguf, by run. */
const flaky = {};

const ROUTES = {
  // The first 20 MB of the real model: a download that stops early.
  "/test/truncated.gguf": (root, res) => {
    const file = path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": 20_000_000 });
    fs.createReadStream(file, { start: 0, end: 19_999_999 }).on("error", () => res.destroy()).pipe(res);
  },
  // The default model over a connection that drops after 30 MB, once per `run`; asked
  // again, it answers a Range request with 206 (mode=range) or ignores it and sends
  // the whole file (mode=norange). /test/flaky-log?run=… lists the requests' headers.
  "/test/flaky.gguf": (root, res, req) => {
    const file = path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    const q = new URL(req.url, "http://x").searchParams;
    const seen = (flaky[q.get("run")] ??= []);
    seen.push({ range: req.headers.range ?? null, ifRange: req.headers["if-range"] ?? null });
    const size = fs.statSync(file).size;
    const etag = '"smollm2-q4_1"';
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    if (seen.length > 1 && m && q.get("mode") === "range" && req.headers["if-range"] === etag) {
      const start = Number(m[1]);
      res.writeHead(206, { "content-length": size - start, "content-range": `bytes ${start}-${size - 1}/${size}`, etag });
      return fs.createReadStream(file, { start }).on("error", () => res.destroy()).pipe(res);
    }
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": size, etag, "accept-ranges": "bytes" });
    const stream = fs.createReadStream(file, seen.length === 1 ? { end: 30_000_000 - 1 } : {});
    stream.on("error", () => res.destroy()).pipe(res, { end: seen.length > 1 });
    // The first time: the connection drops before the end.
    if (seen.length === 1) stream.on("end", () => setTimeout(() => res.destroy(), 50));
  },
  // The default model at `mbps` MB/s (a user's connection, for measuring what a load
  // overlaps with its download: scripts/lib/check_3b_browser.mjs).
  "/test/slow.gguf": async (root, res, req) => {
    const file = path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    const perTick = Number(new URL(req.url, "http://x").searchParams.get("mbps") ?? 10) * 1e5;
    const data = fs.readFileSync(file);
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": data.length });
    for (let at = 0; at < data.length && !res.destroyed; at += perTick) {
      res.write(data.subarray(at, at + perTick));
      await new Promise((r) => setTimeout(r, 100));
    }
    res.end();
  },
  "/test/flaky-log": (root, res, req) => {
    const run = new URL(req.url, "http://x").searchParams.get("run");
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(flaky[run] ?? []));
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
      if (route) return route(root, res, req);
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
