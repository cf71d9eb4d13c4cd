// The playground end to end in Debian's headless Chromium (WebGPU through SwiftShader):
// load the default model, chat with streaming, stop mid-stream, chat again, load an
// adapter and use it, clone a conversation and continue it after a reload, with no
// console errors; a screenshot is saved as an artifact.
// Without WebGPU the page says so and runs the model on the CPU backend.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { serve } from "./serve.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const ARTIFACTS = path.join(root, "target", "artifacts");
const FLAGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"];
let server, base;

async function open(args, errors) {
  const userDataDir = fs.mkdtempSync(path.join(fs.realpathSync("/tmp"), "pippin-profile-"));
  const ctx = await chromium.launchPersistentContext(userDataDir, { executablePath: "/usr/bin/chromium", args, viewport: { width: 1280, height: 860 } });
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${base}/`);
  await page.waitForSelector("body[data-ready=true]");
  return { ctx, page };
}

before(async () => {
  server = await serve(0);
  base = `http://127.0.0.1:${server.address().port}`;
  fs.mkdirSync(ARTIFACTS, { recursive: true });
});

after(() => server?.close());

async function lastReply(page) {
  return page.locator(".msg.assistant").last().innerText();
}

test("chat, stop, chat again, adapter: a working playground", async () => {
  const errors = [];
  const { ctx, page } = await open(["--enable-unsafe-webgpu", ...FLAGS], errors);
  try {
    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", "8");
    await page.click("#load");
    await page.waitForFunction(() => !document.querySelector("#input").disabled, null, { timeout: 240_000 });
    assert.match(await page.textContent("#progress-text"), /Ready/);
    assert.match(await page.textContent("#status"), /30 layers · CPU \(2 threads\)/);
    // SwiftShader is a software adapter: "auto" runs the model on the CPU and says why.
    assert.match(await page.textContent("#n-backend"), /CPU: the only WebGPU adapter is a software one/);

    await page.fill("#input", "What is the capital of France?");
    await page.click("#send");
    await page.waitForSelector(".msg.assistant .meta", { timeout: 240_000 });
    assert.match(await lastReply(page), /Paris/);
    assert.match(await page.textContent("#n-decode"), /tok\/s/);

    // Stop mid-stream: a long answer, stopped after its first words.
    await page.fill("#max-tokens", "200");
    await page.fill("#input", "Tell me a long story about a hobbit.");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelector(".msg.assistant:last-child")?.textContent.length > 10, null, { timeout: 240_000 });
    await page.click("#stop");
    await page.waitForSelector(".msg.assistant:last-child .meta", { timeout: 120_000 });
    assert.match(await page.locator(".msg.assistant .meta").last().innerText(), /stopped/);

    await page.fill("#max-tokens", "6");
    await page.fill("#input", "Thanks! And Italy?");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelectorAll(".msg.assistant .meta").length === 3, null, { timeout: 240_000 });

    await page.fill("#adapter-url", "/adapters/demo");
    await page.click("#load-adapter");
    await page.waitForSelector("#adapters input[data-adapter=demo]:checked", { timeout: 120_000 });
    // The adapter changes the answer: the same question in a new chat, with it and
    // then with none (greedy, so each answer is deterministic).
    const ask = async (q) => {
      await page.click("#new-chat");
      await page.waitForFunction(() => playground.current && playground.messages.length === 0);
      await page.fill("#input", q);
      await page.click("#send");
      // The reply's own text (the message element also shows its token count), once
      // the page has recorded it.
      await page.waitForFunction(() => playground.messages.at(-1)?.role === "assistant", null, { timeout: 240_000 });
      return page.evaluate(() => playground.messages.at(-1).content);
    };
    await page.fill("#max-tokens", "12");
    const withAdapter = await ask("Write a poem about the sea.");
    assert.match(await page.textContent("#adapters"), /demo \(rank 8/);
    await page.check('#adapters input[data-adapter=""]');
    await page.waitForSelector('#adapters input[data-adapter=""]:checked');
    const without = await ask("Write a poem about the sea.");
    assert.notEqual(withAdapter, without, "the adapter changes the reply");

    // Structured output: the schema box makes the reply JSON, shown pretty-printed.
    await page.fill("#max-tokens", "40");
    await page.fill("#schema", JSON.stringify({ type: "object", properties: { answer: { enum: ["yes", "no"] } }, required: ["answer"], additionalProperties: false }));
    await ask("Is the sky blue?");
    const structured = JSON.parse(await page.locator(".msg.assistant pre.structured").last().innerText());
    assert.ok(["yes", "no"].includes(structured.answer), JSON.stringify(structured));
    assert.match(await page.locator(".structured-verdict").last().innerText(), /valid JSON/);
    await page.fill("#schema", "{ not json");
    await page.fill("#input", "Hello");
    await page.click("#send");
    await page.waitForSelector("#banner:not([hidden])");
    assert.match(await page.textContent("#banner"), /not valid JSON/);
    await page.fill("#schema", "");
    assert.equal(await page.isHidden("#banner"), true, "editing the schema clears its error");

    // Conversations: a clone goes on apart from its original; both are kept and
    // continue after a reload, restored from their KV state.
    await page.fill("#max-tokens", "8");
    await page.click("#new-chat");
    await page.waitForFunction(() => playground.messages.length === 0);
    const say = async (q, n) => {
      await page.fill("#input", q);
      await page.click("#send");
      await page.waitForFunction((n) => playground.messages.length === n && !playground.busy, n, { timeout: 240_000 });
    };
    await say("What is the capital of France?", 2);
    await page.click("#clone-chat");
    await page.waitForFunction(() => playground.current.title.endsWith("(copy)"));
    assert.equal(await page.evaluate(() => playground.messages.length), 2, "a clone has its original's turns");
    await say("And of Italy?", 4);
    const copyTitle = await page.locator("#conversations li.current button").first().innerText();
    assert.match(copyTitle, /\(copy\)$/);
    await page.locator("#conversations li button", { hasText: /^What is the capital of France\?$/ }).first().click();
    await page.waitForFunction(() => playground.messages.length === 2);
    assert.match(await page.locator(".msg.assistant").last().innerText(), /Paris/);
    assert.match(await page.textContent("#n-prefix"), /kept/);
    await page.reload();
    await page.waitForSelector("body[data-ready=true]");
    await page.click("#load");
    await page.waitForFunction(() => !document.querySelector("#input").disabled, null, { timeout: 240_000 });
    assert.match(await page.textContent("#conversations"), /\(copy\) \(saved\)/);
    await page.locator("#conversations li button", { hasText: copyTitle }).first().click();
    await page.waitForFunction(() => playground.messages.length === 4, null, { timeout: 120_000 });
    await say("And of Spain?", 6);
    const meta = await page.locator(".msg.assistant .meta").last().innerText();
    const [, cached, prompt] = meta.match(/(\d+) of (\d+) prompt tokens cached/);
    assert.ok(Number(cached) > 30 && Number(prompt) - Number(cached) < 20, `a restored conversation runs only the new turn: ${meta}`);

    await page.screenshot({ path: path.join(ARTIFACTS, "playground.png"), fullPage: true });
    assert.deepEqual(errors, []);
    assert.equal(await page.isHidden("#banner"), true, await page.textContent("#banner"));
  } catch (e) {
    // What the page showed when it failed: a screenshot and its text.
    await page.screenshot({ path: path.join(ARTIFACTS, "playground-failure.png"), fullPage: true });
    console.error("page at failure:", await page.textContent("#banner"), "|", await page.textContent("#messages"), "| errors:", errors);
    throw e;
  } finally {
    await ctx.close();
  }
});

test("without WebGPU the playground runs on the CPU and says how to get the GPU", async () => {
  const errors = [];
  const { ctx, page } = await open(FLAGS, errors);
  try {
    await page.waitForSelector("#banner:not([hidden])");
    const text = await page.textContent("#banner");
    assert.match(text, /WebGPU is not available/);
    assert.match(text, /runs on the CPU/);
    assert.match(text, /Chrome/);
    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", "8");
    await page.click("#load");
    await page.waitForFunction(() => !document.querySelector("#input").disabled, null, { timeout: 120_000 });
    assert.match(await page.textContent("#status"), /30 layers · CPU/);
    assert.match(await page.textContent("#n-backend"), /CPU: WebGPU gave no adapter/);
    await page.fill("#input", "What is the capital of France?");
    await page.click("#send");
    await page.waitForSelector(".msg.assistant .meta", { timeout: 120_000 });
    assert.match(await lastReply(page), /Paris/);
    await page.screenshot({ path: path.join(ARTIFACTS, "playground-no-webgpu.png") });
    assert.deepEqual(errors.filter((e) => !/No available adapters/.test(e)), []);
  } finally {
    await ctx.close();
  }
});
