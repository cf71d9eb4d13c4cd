// What the page test files share: the test wrapper with its bound, the default model,
// Chromium's flags, and a browser on pkg-tests/app.html served from the repository
// (each file its own server and browser: node runs two files side by side).
import { test as nodeTest, before, after } from "node:test";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { serve } from "./serve.mjs";

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const MODEL = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
export const FLAGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"];

/** Each test has 5 minutes (the slowest takes ~1.5): one that hangs fails with its own
 * name. (`node --test --test-timeout` would bound each file as a whole.) */
export const test = (name, fn) => nodeTest(name, { timeout: 300_000 }, fn);

/** The repository served over HTTP; `base` is its URL. */
export async function start() {
  const server = await serve(root);
  return { server, base: `http://127.0.0.1:${server.address().port}` };
}

/** A browser with `args` on app.html, its console errors collected in `errors`. */
export async function open(base, args, errors) {
  const b = await chromium.launch({ executablePath: "/usr/bin/chromium", args });
  const p = await b.newPage();
  p.on("console", (m) => m.type() === "error" && errors.push(`${m.text()} [${m.location()?.url ?? ""}]`));
  p.on("pageerror", (e) => errors.push(e.message));
  await p.goto(`${base}/pkg-tests/app.html`);
  await p.waitForFunction(() => window.ready);
  return [b, p];
}

/** A test file's pages: the repository served and a browser on app.html (WebGPU on)
 * from before its tests to after them, then `setup(s)` (in the same hook: node may
 * run a file's hooks in any order); `open(args)` opens another browser, whose console
 * errors also land in `errors`. */
export function pages(setup = async () => {}) {
  const s = { errors: [] };
  s.open = (args) => open(s.base, args, s.errors);
  before(async () => {
    ({ server: s.server, base: s.base } = await start());
    [s.browser, s.page] = await s.open(["--enable-unsafe-webgpu", ...FLAGS]);
    await setup(s);
  });
  after(async () => {
    await s.browser?.close();
    s.server?.close();
  });
  return s;
}
