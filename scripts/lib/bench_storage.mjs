// Cache Storage against the Origin Private File System for a model-sized file, side by
// side in one headless Chromium: a stream of N MB written (Cache.put of a streamed
// Response, as Pippin.load keeps a download; OPFS: FileSystemWritableFileStream) and
// read back whole as a stream (as a cached load reads it). Prints one JSON line per
// size. Usage: node scripts/lib/bench_storage.mjs [MB...] (default 256 2048)
// The browser keeps a profile on disk, as a user's does: Playwright's default context
// is off the record, where Chromium holds Cache Storage in memory and refuses a large
// put ("UnknownError: Unexpected internal error").
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "../../pkg-tests/node_modules/playwright-core/index.mjs";
import { serve } from "../../pkg-tests/serve.mjs";

const sizes = process.argv.slice(2).map(Number);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const server = await serve(root);
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "pippin-bench-storage-"));
const browser = await chromium.launchPersistentContext(profile, { executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(0);
  await page.goto(`http://127.0.0.1:${server.address().port}/pkg-tests/app.html`);
  for (const mb of sizes.length ? sizes : [256, 2048]) {
    const r = await page.evaluate(async (mb) => {
      const CHUNK = 4 << 20;
      const total = mb * 2 ** 20; // not mb << 20: that is an int32, negative at 2048
      const block = new Uint8Array(CHUNK).map((_, i) => (i * 2654435761) >>> 24);
      // A fresh copy per chunk, as a network stream hands out.
      const source = () => {
        let sent = 0;
        return new ReadableStream({
          pull(c) {
            if (sent >= total) return c.close();
            c.enqueue(block.slice());
            sent += CHUNK;
          },
        });
      };
      const drain = async (stream) => {
        let n = 0;
        for (const reader = stream.getReader(); ; ) {
          const { done, value } = await reader.read();
          if (done) return n;
          n += value.byteLength;
        }
      };
      const time = async (f) => {
        const t = performance.now();
        const v = await f();
        return [performance.now() - t, v];
      };
      const out = { mb, quotaMb: Math.round((await navigator.storage.estimate()).quota / 2 ** 20) };
      // Cache Storage.
      await caches.delete("bench");
      const cache = await caches.open("bench");
      const headers = { "x-bench-size": String(total) };
      [out.cacheWriteMs] = await time(() => cache.put("/bench.bin", new Response(source(), { headers })));
      const hit = await cache.match("/bench.bin");
      // Chromium may accept a put and keep nothing (seen at 2 GB): say so, not a TypeError.
      [out.cacheReadMs, out.cacheReadBytes] = hit ? await time(async () => drain(hit.body)) : [NaN, 0];
      await caches.delete("bench");
      // The Origin Private File System.
      const dir = await navigator.storage.getDirectory();
      const file = await dir.getFileHandle("bench.bin", { create: true });
      [out.opfsWriteMs] = await time(async () => source().pipeTo(await file.createWritable()));
      [out.opfsReadMs, out.opfsReadBytes] = await time(async () => drain((await file.getFile()).stream()));
      await dir.removeEntry("bench.bin");
      for (const k of ["cacheWrite", "cacheRead", "opfsWrite", "opfsRead"]) out[`${k}MBps`] = Math.round(mb / (out[`${k}Ms`] / 1000));
      return out;
    }, mb);
    console.log(JSON.stringify(r));
  }
} finally {
  await browser.close();
  server.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
