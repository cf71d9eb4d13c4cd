// The built package in Firefox (Debian's firefox-esr, headless, driven over WebDriver
// BiDi by puppeteer-core): no WebGPU there on Linux, so the CPU backend runs the model.
// Sessions through both entries, a saved session restored in a new page, the Prompt
// API polyfill and log-probabilities: the same page code and checks as the Chromium
// tests (sessions.mjs, prompt-api.mjs, logprobs.mjs).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";
import { serve } from "./serve.mjs";
import { SYSTEM, sessionRun, sessionsOnPage, checkSessions, checkPrefixCache, restoreOnPage, checkRestore } from "./sessions.mjs";
import { checkPromptApiInBothEntries } from "./prompt-api.mjs";
import { logprobsReference, logprobsOnPage, checkLogprobs } from "./logprobs.mjs";
import { floodedOnPage, checkFlooded } from "./threads.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const MODEL = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const FIREFOX = process.env.FIREFOX ?? "/usr/bin/firefox-esr";

let server, base, browser, page, saved;

async function open() {
  const p = await browser.newPage();
  p.on("pageerror", (e) => console.error(`page error: ${e.message}`));
  await p.goto(`${base}/pkg-tests/app.html`);
  await p.waitForFunction(() => window.ready);
  return p;
}

before(async () => {
  server = await serve(root);
  base = `http://127.0.0.1:${server.address().port}`;
  browser = await puppeteer.launch({ browser: "firefox", executablePath: FIREFOX, headless: true, protocolTimeout: 600_000 });
  page = await open();
  const info = await page.evaluate(async (url) => {
    window.llm = await Pippin.load(url, { cache: false });
    return llm.info();
  }, MODEL);
  assert.equal(info.backend, "cpu", "Firefox on Linux has no WebGPU: the CPU backend");
});

after(async () => {
  await browser?.close();
  server?.close();
});

test("Firefox: a CPU helper thread woken without a new round serves nothing", async () => {
  checkFlooded(await page.evaluate(floodedOnPage, MODEL));
});

test("Firefox: sessions — a clone continues as a fresh session would, append then prompt is one prompt, a common system prompt is cached, Busy", async () => {
  const r = await page.evaluate(sessionsOnPage, [sessionRun.toString(), SYSTEM]);
  checkSessions(r);
  checkPrefixCache(r);
  saved = r;
});

test("Firefox: a saved session restored in a new page writes what it would have", async () => {
  assert.ok(saved, "the sessions test ran first");
  const p = await open();
  try {
    checkRestore(await p.evaluate(restoreOnPage, [MODEL, saved.saved]), saved);
  } finally {
    await p.close();
  }
});

test("Firefox: pippin/worker sessions write what pippin's do", async () => {
  const r = await page.evaluate(async ([url, run, system]) => {
    const llm = await WorkerPippin.load(url, { cache: false });
    const out = await eval(`(${run})`)(llm, system);
    const info = await llm.info();
    await llm.dispose();
    return { ...out, info };
  }, [MODEL, sessionRun.toString(), SYSTEM]);
  checkSessions(r);
  for (const k of ["first", "cloned", "afterAppend", "next"]) assert.equal(r[k], saved[k], `${k}: the same text in both entries`);
});

test("Firefox: an app written against Chrome's Prompt API runs unchanged on pippin/prompt-api, in pippin and pippin/worker", async () => {
  await checkPromptApiInBothEntries(open, MODEL);
});

test("Firefox: OpenAI's logprobs and logit_bias are llama.cpp's log-probabilities, in pippin and pippin/worker", async () => {
  const ref = logprobsReference();
  checkLogprobs(await page.evaluate(logprobsOnPage, [MODEL, ref.messages, ref.steps[0].id]), ref);
});
