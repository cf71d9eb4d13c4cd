// The prefix cache in the browser: time to first token of a second conversation that
// shares a ~460-token system prompt with a first one, after an unrelated conversation
// in between (so the live KV cache no longer holds it), with the prefix cache and
// without (`sessionMemory: 0`), side by side in one headless Chromium, through pippin
// and pippin/worker (CPU backend; the page is cross-origin isolated: every core). The
// same conversations as `pippin bench`'s prefix figure (cli/src/bench_sessions.rs).
//
//   node scripts/bench-browser.d/prefix.mjs [--model PATH] [--json]
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";
import { serve } from "../../pkg-tests/serve.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const { values: opt } = parseArgs({
  options: {
    model: { type: "string", default: "models/SmolLM2-135M-Instruct.Q4_1.gguf" },
    json: { type: "boolean", default: false },
  },
});
const url = `/${path.relative(root, path.resolve(root, opt.model))}`;
if (url.startsWith("/..")) throw new Error(`--model must be inside ${root}`);

/** The native bench's system prompt: a bakery's rules, ~460 tokens. */
function system() {
  const items = ["rye bread", "croissants", "sourdough", "baguettes", "cinnamon rolls", "apple pie", "brioche", "bagels", "scones", "muffins"];
  let s = "You are the assistant of a small bakery. Follow these rules exactly.\n";
  items.forEach((item, i) => {
    s += `Rule ${i + 1}: ${item} are baked every morning at ${5 + (i % 3)} o'clock; say so when asked, never promise a reservation, and suggest calling the shop for orders larger than ${10 + 5 * i} pieces.\n`;
  });
  return s + "Keep every answer short, friendly and precise; never invent a price.";
}

/** In the page: conversation 1, an unrelated one, conversation 2 (timed), with and without. */
async function onPage([url, system, entry]) {
  const P = entry === "pippin/worker" ? WorkerPippin : Pippin;
  const run = async (sessionMemory) => {
    const llm = await P.load(url, { cache: false, maxContext: 1024, ...(sessionMemory === undefined ? {} : { sessionMemory }) });
    const ask = async (messages) => {
      let text = "";
      let usage;
      for await (const c of llm.chat(messages, { maxTokens: 8 })) {
        if (c.done) usage = c.usage;
        else text += c.text;
      }
      return { text, usage };
    };
    const sys = (q) => [{ role: "system", content: system }, { role: "user", content: q }];
    await ask(sys("When are croissants baked?"));
    await ask([{ role: "user", content: "Say hello." }]);
    const r = await ask(sys("Can I order 40 bagels?"));
    const info = await llm.info();
    await llm.dispose();
    return { ...r, threads: info.threads };
  };
  return { with: await run(undefined), without: await run(0) };
}

const server = await serve(root);
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-background-networking", "--no-first-run"] });
const rows = [];
try {
  for (const entry of ["pippin", "pippin/worker"]) {
    const page = await browser.newPage();
    await page.goto(`${base}/pkg-tests/app.html`);
    await page.waitForFunction(() => window.ready);
    const r = await page.evaluate(onPage, [url, system(), entry]);
    await page.close();
    const side = (x) => ({ timeToFirstTokenMs: x.usage.timeToFirstTokenMs, cachedTokens: x.usage.cachedTokens, promptTokens: x.usage.promptTokens });
    rows.push({ entry, threads: r.with.threads, with: side(r.with), without: side(r.without), speedUp: r.without.usage.timeToFirstTokenMs / r.with.usage.timeToFirstTokenMs, sameText: r.with.text === r.without.text });
  }
} finally {
  await browser.close();
  server.close();
}
if (opt.json) console.log(JSON.stringify(rows, null, 1));
else {
  for (const r of rows) {
    console.log(
      `${r.entry} (CPU backend, ${r.threads} threads): time to first token ${r.with.timeToFirstTokenMs.toFixed(0)} ms with the prefix cache (${r.with.cachedTokens} of ${r.with.promptTokens} prompt tokens cached), ` +
        `${r.without.timeToFirstTokenMs.toFixed(0)} ms without (${r.without.cachedTokens} cached): ${r.speedUp.toFixed(1)}×, same text: ${r.sameText}`,
    );
  }
}
