// Serves the playground on 127.0.0.1: the page (www/), the built package (/pkg/),
// the models (/models/) and adapters (/adapters/NAME/ from target/adapters/NAME).
//   node www/serve.mjs [--port 8080]
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const TYPES = {
  ".js": "text/javascript", ".mjs": "text/javascript", ".html": "text/html; charset=utf-8", ".css": "text/css",
  ".wasm": "application/wasm", ".json": "application/json", ".svg": "image/svg+xml",
};
const ROUTES = [
  ["/pkg/", path.join(root, "pkg")],
  ["/models/", path.join(root, "models")],
  ["/adapters/", path.join(root, "target", "adapters")],
  ["/", path.join(root, "www")],
];

function resolve(urlPath) {
  for (const [prefix, dir] of ROUTES) {
    if (urlPath.startsWith(prefix)) {
      const rel = decodeURIComponent(urlPath.slice(prefix.length)) || "index.html";
      const file = path.join(dir, path.normalize(rel));
      return file.startsWith(dir) ? file : null;
    }
  }
  return null;
}

export function serve(port = 0) {
  const server = http.createServer((req, res) => {
    const file = resolve(new URL(req.url, "http://x").pathname);
    if (!file || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    res.writeHead(200, {
      "content-type": TYPES[path.extname(file)] ?? "application/octet-stream",
      "content-length": fs.statSync(file).size,
      "cache-control": "no-cache",
    });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((ok) => server.listen(port, "127.0.0.1", () => ok(server)));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--port");
  const server = await serve(i > 0 ? Number(process.argv[i + 1]) : 8080);
  console.log(`Pippin playground: http://127.0.0.1:${server.address().port}/`);
}
