// Page code and checks of pippin/prompt-api shared by the Chromium (app.test.mjs) and
// Firefox (firefox.test.mjs) tests: an app written against Chrome's documented Prompt
// API, run unchanged on the polyfill.
import assert from "node:assert/strict";

/** In a page: an app written against Chrome's documented Prompt API, on the polyfill
 * (`worker`: in pippin/worker). */
export async function promptApiApp([url, worker]) {
  const { installPolyfill } = await import("pippin/prompt-api");
  const before = typeof globalThis.LanguageModel;
  const LM = installPolyfill({ model: url, cache: false, worker });
  const installed = globalThis.LanguageModel === LM || before !== "undefined";
  installPolyfill({ model: url, cache: false, worker, force: true });
  // From here on, as Chrome's documentation writes it.
  const availability = await LanguageModel.availability();
  const progress = [];
  const session = await LanguageModel.create({
    monitor(m) {
      m.addEventListener("downloadprogress", (e) => progress.push(e.loaded));
    },
    initialPrompts: [{ role: "system", content: "You are a helpful assistant." }],
    topK: 1,
    temperature: 1,
  });
  const available = await LanguageModel.availability();
  const answer = await session.prompt("What is the capital of France?");
  let streamed = "";
  for await (const chunk of session.promptStreaming("And of Italy?")) streamed += chunk;
  const usage = session.contextUsage;
  const window_ = session.contextWindow;
  const measured = await session.measureContextUsage("And of Spain?");
  const clone = await session.clone();
  const fromClone = await clone.prompt([{ role: "user", content: [{ type: "text", value: "And of Spain?" }] }]);
  const fromOriginal = await session.prompt("And of Spain?");
  const schema = { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false };
  const json = await session.prompt("Name a city in France as JSON.", { responseConstraint: schema });
  const yesNo = await session.prompt("Is Paris in France? Answer yes or no.", { responseConstraint: /(yes|no)/, omitResponseConstraintInput: true });
  await session.append([{ role: "user", content: "Remember the number 7." }]);
  const image = await LanguageModel.create({ expectedInputs: [{ type: "image" }] }).then(() => "created", (e) => e.name);
  const audio = await LanguageModel.availability({ expectedInputs: [{ type: "audio" }] });
  const controller = new AbortController();
  const long = session.prompt("Write a long story about a dragon.", { signal: controller.signal });
  setTimeout(() => controller.abort(), 300);
  const aborted = await long.then(() => "finished", (e) => e.name);
  const afterAbort = await session.prompt("What is 2+2?");
  // Calls at once wait their turn, as Chrome's do (the engine answers one at a time).
  const together = await Promise.all([session.prompt("What is 1+1?"), clone.prompt("What is 3+3?"), session.measureContextUsage("Hi")]).then(
    (r) => r.map((x) => typeof x),
    (e) => e.name,
  );
  // destroy() ends a reply running with AbortError, and the model goes on.
  const victim = await session.clone();
  const running = victim.prompt("Write a long story about a cat.");
  setTimeout(() => victim.destroy(), 300);
  const destroyedWhileRunning = await running.then(() => "finished", (e) => e.name);
  const afterDestroy = await clone.prompt("What is 5+5?");
  session.destroy();
  const destroyed = await session.prompt("Hi").then(() => "answered", (e) => e.name);
  // The same model through Pippin's own API: the same greedy text.
  const { Pippin } = await import("pippin");
  const llm = await Pippin.load(url, { cache: false });
  const direct = await llm.chat([{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "What is the capital of France?" }], { maxTokens: 200 }).text();
  await llm.dispose();
  return { installed, availability, available, progress, answer, streamed, usage, window_, measured, fromClone, fromOriginal, json, yesNo, image, audio, aborted, afterAbort, together, destroyedWhileRunning, afterDestroy, destroyed, direct };
}

/** The checks of `promptApiApp`'s result. */
export function checkPromptApi(r) {
  assert.ok(r.installed);
  assert.equal(r.availability, "downloadable");
  assert.equal(r.available, "available");
  assert.ok(r.progress.length > 2 && r.progress.at(-1) === 1, JSON.stringify(r.progress.slice(-3)));
  assert.match(r.answer, /Paris/);
  assert.equal(r.answer, r.direct, "the polyfill's greedy reply is Pippin's");
  assert.match(r.streamed, /Rome/);
  assert.ok(r.usage > 30 && r.window_ === 2048 && r.measured > 3 && r.measured < 20, `${r.usage} ${r.window_} ${r.measured}`);
  assert.equal(r.fromClone, r.fromOriginal, "a clone goes on as the original does");
  assert.equal(typeof JSON.parse(r.json).city, "string");
  assert.match(r.yesNo, /^(yes|no)$/);
  assert.equal(r.image, "NotSupportedError");
  assert.equal(r.audio, "unavailable");
  assert.equal(r.aborted, "AbortError");
  assert.ok(r.afterAbort.length > 0);
  assert.deepEqual(r.together, ["string", "string", "number"], "calls at once are queued, not refused");
  assert.equal(r.destroyedWhileRunning, "AbortError");
  assert.ok(r.afterDestroy.length > 0);
  assert.equal(r.destroyed, "InvalidStateError");
}

/** `promptApiApp` in pippin and in pippin/worker, each on a page of its own from
 * `open()` (the polyfill's model is the page's until it closes), checked. */
export async function checkPromptApiInBothEntries(open, url) {
  for (const worker of [false, true]) {
    const p = await open();
    try {
      checkPromptApi(await p.evaluate(promptApiApp, [url, worker]));
    } finally {
      await p.close();
    }
  }
}
