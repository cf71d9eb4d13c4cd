// The npm package as a user's app gets it: the tarball `npm pack` makes of pkg/,
// installed into a small app (bundlers/app) that imports both entries by name, built by
// Vite, webpack 5 and esbuild, and run by Vite's dev server; each is served and opened
// in Debian's headless Chromium (WebGPU through SwiftShader), where `pippin` and
// `pippin/worker` must both generate the reference's greedy tokens, and a guided reply
// (which fetches the lazily loaded guided module).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { execFileSync, spawn } from "node:child_process";
import { chromium } from "playwright-core";
import { serve } from "./serve.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..");
const apps = path.join(here, "bundlers");
const MODEL = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const FLAGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"];

// transformers' greedy continuation (../shared/testdata), its first tokens.
const reference = JSON.parse(fs.readFileSync(path.join(root, "../shared/testdata/smollm2-reference.json"), "utf8"));
const capital = reference.prompts.find((p) => p.name === "capital_fr");
const TOKENS = 3;
const want = capital.float32.greedy_token_ids.slice(0, TOKENS);
const query = `?model=${encodeURIComponent(MODEL)}&prompt=${encodeURIComponent(capital.prompt)}&n=${TOKENS}`;

let server, base, browser, dev;
const consoleErrors = [];

function sh(cmd, args) {
  return execFileSync(cmd, args, { cwd: apps, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
}

/** The three production builds, each in dist/<bundler>/ beside its index.html. */
function buildAll() {
  sh("npx", ["vite", "build"]);
  sh("npx", ["webpack", "--config", "webpack.config.js"]);
  fs.copyFileSync(path.join(apps, "app/index.html"), path.join(apps, "dist/webpack/index.html"));
  // esbuild does not follow new URL(..., import.meta.url): the worker's host is a
  // second entry point and the two wasm files are copied beside the bundles
  // (docs/javascript.md, bundlers).
  fs.rmSync(path.join(apps, "dist/esbuild"), { recursive: true, force: true });
  sh("npx", ["esbuild", "app/main.js", "pippin/worker-host.js", "pippin/thread.js", "--bundle", "--format=esm", "--outdir=dist/esbuild", "--entry-names=[name]", "--log-level=warning"]);
  for (const f of ["app/index.html", "node_modules/pippin/pippin_wasm_bg.wasm", "node_modules/pippin/pippin_guided_bg.wasm"]) {
    fs.copyFileSync(path.join(apps, f), path.join(apps, "dist/esbuild", path.basename(f)));
  }
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Vite's dev server on the app, /models forwarded to the static server. */
async function startDev() {
  const port = await freePort();
  const proc = spawn("npx", ["vite", "--host", "127.0.0.1", "--port", String(port), "--strictPort"], {
    cwd: apps,
    env: { ...process.env, PIPPIN_MODELS_ORIGIN: base },
    stdio: ["ignore", "inherit", "inherit"],
    detached: true,
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300; i++) {
    if (await fetch(url).then((r) => r.ok, () => false)) return { proc, url };
    await new Promise((r) => setTimeout(r, 100));
  }
  process.kill(-proc.pid);
  throw new Error("vite's dev server did not start");
}

before(async () => {
  sh("npm", ["ci", "--no-audit", "--no-fund", "--silent"]);
  const packed = fs.mkdtempSync(path.join(os.tmpdir(), "pippin-pack-"));
  const tgz = sh("npm", ["pack", "--silent", "--pack-destination", packed, path.join(root, "pkg")]).trim().split("\n").at(-1);
  sh("npm", ["install", "--no-save", "--no-audit", "--no-fund", "--silent", path.join(packed, tgz)]);
  buildAll();
  server = await serve(root);
  base = `http://127.0.0.1:${server.address().port}`;
  dev = await startDev();
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: FLAGS });
});

after(async () => {
  await browser?.close();
  server?.close();
  if (dev) process.kill(-dev.proc.pid);
});

/** Opens the app at `url` and waits for its two runs (greedy tokens, a guided reply). */
async function runApp(url) {
  const page = await browser.newPage();
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(`${url}: ${m.text()}`));
  page.on("pageerror", (e) => consoleErrors.push(`${url}: ${e.message}`));
  try {
    await page.goto(url + query);
    // window.result is the app's promise: awaited here, bounded by a timeout.
    await page.waitForFunction(() => window.result, null, { timeout: 60_000 });
    return await page.evaluate(() =>
      Promise.race([window.result, new Promise((_, no) => setTimeout(() => no(new Error("the app did not finish in 180 s")), 180_000))]),
    );
  } finally {
    await page.close();
  }
}

/** Both entries gave the reference's tokens and a reply the regex allows; on an
 * isolated page (the static server's; Vite's dev server sends no COOP/COEP) the CPU
 * backend ran on 2 threads, so the build emitted its thread worker. */
function check(r, isolated) {
  assert.equal(r.error, undefined, r.error);
  for (const entry of ["main", "worker"]) {
    assert.deepEqual(r[entry].ids, want, entry);
    assert.match(r[entry].guided, /^(yes|no)$/, entry);
    assert.equal(r[entry].isolated, isolated, entry);
    if (isolated) assert.equal(r[entry].threads, 2, `${entry}: ${r[entry].threadsReason}`);
  }
}

for (const bundler of ["vite", "webpack", "esbuild"]) {
  test(`${bundler} build: pippin and pippin/worker generate the reference's greedy tokens and a guided reply`, { timeout: 300_000 }, async () => {
    check(await runApp(`${base}/pkg-tests/bundlers/dist/${bundler}/index.html`), true);
  });
}

test("vite dev server: pippin and pippin/worker generate the reference's greedy tokens and a guided reply", { timeout: 300_000 }, async () => {
  check(await runApp(`${dev.url}/`), false);
});

test("no app logged an error", () => {
  assert.deepEqual(consoleErrors, []);
});
