// Both dev servers (www/serve.mjs, pkg-tests/serve.mjs) against hostile requests:
// malformed escapes are 400, nothing outside the served folders is ever sent (`..`,
// encoded slashes, absolute paths), a foreign Host is refused (DNS rebinding), and
// the server answers normally afterwards.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { serve as servePlayground } from "./serve.mjs";
import { serve as serveTests } from "../pkg-tests/serve.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
let servers = [];

/** A raw request: the path goes on the wire exactly as written. */
function get(server, rawPath, host) {
  const port = server.address().port;
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, path: rawPath, headers: { host: host ?? `127.0.0.1:${port}` } }, (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

before(async () => {
  servers = [await servePlayground(0), await serveTests(root)];
});

after(() => servers.forEach((s) => s.close()));

test("hostile paths are refused and the servers keep serving", async () => {
  for (const [i, server] of servers.entries()) {
    const secret = i === 0 ? "/pkg/..%2fpkg-tests%2fserve.mjs" : "/pkg/..%2f..%2fetc%2fpasswd";
    const cases = [
      ["/%", 400],
      ["/%E0%A4%A", 400],
      ["/models/%00x", 400],
      [secret, 403],
      ["/../README.md", 403],
      ["/pkg/../../../etc/passwd", 403],
      ["/%2e%2e/%2e%2e/etc/passwd", 403],
    ];
    for (const [p, status] of cases) {
      const r = await get(server, p);
      assert.equal(r.status, status, `server ${i}: ${p} → ${r.status} ${r.body}`);
      assert.doesNotMatch(r.body, /root:|import http/, `server ${i}: ${p} leaked a file`);
    }
    // An absolute path stays inside the served folder: there is no such file there.
    const abs = await get(server, "/%2Fetc%2Fpasswd");
    assert.equal(abs.status, 404, `server ${i}: absolute path`);
    // A page elsewhere whose DNS name now points here sends its own Host.
    const rebound = await get(server, "/", "evil.example:8080");
    assert.equal(rebound.status, 403, `server ${i}: foreign Host`);
    // Still up, and still serving what it should.
    const ok = await get(server, i === 0 ? "/" : "/pkg-tests/app.html");
    assert.equal(ok.status, 200, `server ${i} after the hostile requests`);
    const localhost = await get(server, i === 0 ? "/" : "/pkg-tests/app.html", `localhost:${server.address().port}`);
    assert.equal(localhost.status, 200);
  }
});
