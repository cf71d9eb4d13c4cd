// The built package in headless Chromium (WebGPU: SwiftShader here) loads a model by
// URL on the WebGPU backend, optionally under a smaller binding limit, and writes
// greedy text for each prompt; prints { texts, stats, info } as JSON.
// Usage: node check_3b_browser.mjs MODEL_URL_PATH TOKENS MAX_BINDING_BYTES|0 PROMPT...
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "../../pkg-tests/node_modules/playwright-core/index.mjs";
import { serve } from "../../pkg-tests/serve.mjs";

const [model, tokens, binding, ...prompts] = process.argv.slice(2);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const server = await serve(root);
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--enable-unsafe-webgpu", "--no-sandbox"] });
try {
  const page = await browser.newPage();
  page.on("console", (m) => m.type() === "error" && console.error(`console: ${m.text()}`));
  await page.goto(`${base}/pkg-tests/app.html`);
  await page.waitForFunction(() => window.ready);
  page.setDefaultTimeout(0);
  const r = await page.evaluate(
    async ({ model, tokens, binding, prompts }) => {
      const gpuLimits = binding > 0 ? { maxStorageBufferBindingSize: binding } : undefined;
      const m = await Pippin.load(model, { cache: false, backend: "webgpu", maxContext: 512, gpuLimits });
      const texts = {};
      for (const p of prompts) {
        m.reset();
        texts[p] = await m.generate(p, { maxTokens: tokens }).text();
      }
      return { texts, stats: m.stats(), info: m.info() };
    },
    { model, tokens: Number(tokens), binding: Number(binding), prompts },
  );
  console.log(JSON.stringify(r));
} finally {
  await browser.close();
  server.close();
}
