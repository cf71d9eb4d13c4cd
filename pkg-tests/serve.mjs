// A static file server for the browser tests, on 127.0.0.1 only: the repository root
// (pkg/, pkg-tests/, models/), plus a few test-only routes for error cases.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";

const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".html": "text/html", ".wasm": "application/wasm", ".gguf": "application/octet-stream", ".json": "application/json" };

export function serve(root) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    if (url.pathname === "/test/truncated.gguf") {
      // The first 20 MB of the real model: a download that stops early.
      const file = path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": 20_000_000 });
      fs.createReadStream(file, { start: 0, end: 19_999_999 }).pipe(res);
      return;
    }
    const file = path.join(root, path.normalize(url.pathname));
    if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404).end("not found");
      return;
    }
    const size = fs.statSync(file).size;
    res.writeHead(200, { "content-type": TYPES[path.extname(file)] ?? "application/octet-stream", "content-length": size });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}
