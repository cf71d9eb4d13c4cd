// Serves the playground on 127.0.0.1: the page (www/), the built package (/pkg/),
// the models (/models/) and adapters (/adapters/NAME/ from target/adapters/NAME).
// Only requests addressed to this machine are answered (a DNS-rebinding page is
// refused), and no path leaves its folder.
//   node www/serve.mjs [--port 8080]
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { HttpError, ISOLATED, localHost, resolveInside, sendError, sendFile } from "../scripts/lib/static.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const ROUTES = [
  ["/pkg/", path.join(root, "pkg")],
  ["/models/", path.join(root, "models")],
  ["/adapters/", path.join(root, "target", "adapters")],
  ["/", path.join(root, "www")],
];

function resolve(urlPath) {
  for (const [prefix, dir] of ROUTES) {
    if (urlPath.startsWith(prefix)) return resolveInside(dir, urlPath.slice(prefix.length) || "index.html");
  }
  throw new HttpError(404, "not found");
}

export function serve(port = 0) {
  const server = http.createServer((req, res) => {
    try {
      if (!localHost(req)) throw new HttpError(403, "forbidden: this server answers only requests to 127.0.0.1 or localhost");
      const raw = String(req.url ?? "/").split("?")[0].split("#")[0];
      sendFile(res, resolve(raw), { "cache-control": "no-cache", ...ISOLATED });
    } catch (e) {
      sendError(res, e);
    }
  });
  return new Promise((ok) => server.listen(port, "127.0.0.1", () => ok(server)));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--port");
  const server = await serve(i > 0 ? Number(process.argv[i + 1]) : 8080);
  console.log(`Pippin playground: http://127.0.0.1:${server.address().port}/`);
}
