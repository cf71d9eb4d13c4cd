// The built package in headless Chromium (WebGPU: SwiftShader here) loads a model by
// URL on the WebGPU backend, optionally under a smaller binding limit, and writes
// greedy text for each prompt; prints { texts, stats, info } as JSON.
// Usage: node check_3b_browser.mjs MODEL_URL_PATH TOKENS MAX_BINDING_BYTES|0 PROMPT...
// With CACHED=1 the model is loaded twice through Cache Storage (the first load keeps
// the download, the second reads it back), in a profile kept on disk as a user's is;
// prints both loads' stats and what the cache holds.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "../../pkg-tests/node_modules/playwright-core/index.mjs";
import { serve } from "../../pkg-tests/serve.mjs";

const [model, tokens, binding, ...prompts] = process.argv.slice(2);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const server = await serve(root);
const base = `http://127.0.0.1:${server.address().port}`;
const cached = process.env.CACHED === "1";
const args = ["--enable-unsafe-webgpu", "--no-sandbox"];
// Off the record (Playwright's default context) Chromium keeps Cache Storage in memory.
const profile = cached ? fs.mkdtempSync(path.join(os.tmpdir(), "pippin-check-3b-")) : null;
const browser = cached
  ? await chromium.launchPersistentContext(profile, { executablePath: "/usr/bin/chromium", args })
  : await chromium.launch({ executablePath: "/usr/bin/chromium", args });
try {
  const page = await browser.newPage();
  page.on("console", (m) => m.type() === "error" && console.error(`console: ${m.text()}`));
  await page.goto(`${base}/pkg-tests/app.html`);
  await page.waitForFunction(() => window.ready);
  page.setDefaultTimeout(0);
  const r = await page.evaluate(
    async ({ model, tokens, binding, prompts, cached }) => {
      const gpuLimits = binding > 0 ? { maxStorageBufferBindingSize: binding } : undefined;
      const run = async () => {
        const m = await Pippin.load(model, { cache: cached, backend: "webgpu", maxContext: 512, gpuLimits });
        try {
          const texts = {};
          for (const p of prompts) {
            m.reset();
            texts[p] = await m.generate(p, { maxTokens: tokens }).text();
          }
          return { texts, stats: m.stats(), info: m.info() };
        } finally {
          await m.dispose();
        }
      };
      if (!cached) return run();
      const first = await run();
      const again = await run();
      return { first, again, cache: await Pippin.cached() };
    },
    { model, tokens: Number(tokens), binding: Number(binding), prompts, cached },
  );
  console.log(JSON.stringify(r));
} finally {
  await browser.close();
  server.close();
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
}
