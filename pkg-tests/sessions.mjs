// Page code and checks shared by the Chromium (app.test.mjs) and Firefox
// (firefox.test.mjs) tests of sessions: the same app, the same
// assertions, in each browser.
import assert from "node:assert/strict";

// The sessions' conversation: a system prompt of ~60 tokens, and a first exchange.
export const SYSTEM = "You are a careful assistant for a small bakery. You answer questions about bread, pastries, opening hours and prices. Keep every answer short and friendly; never invent a price.";

/** In the page: sessions of `llm` (either entry) — clone, append, the cached system
 * prompt, Busy between sessions, a save. */
export async function sessionRun(llm, system) {
  const o = { maxTokens: 10 };
  const a = await llm.createSession({ system, ...o });
  const first = await a.prompt("Do you sell rye bread?");
  const b = await a.clone();
  const cloned = await b.prompt("How much is it?");
  // A fresh session given the same history.
  const fresh = await llm.createSession({ system, messages: a.messages.slice(1), ...o });
  const again = await fresh.prompt("How much is it?");
  const original = await a.prompt("How much is it?");
  // append, then prompt: as one prompt of both.
  const p = await llm.createSession({ system, ...o });
  const appended = await p.append("My name is Ana.");
  const afterAppend = await p.prompt("What is my name?");
  const q = await llm.createSession({ system, ...o });
  const both = await q.prompt(["My name is Ana.", "What is my name?"]);
  // A new session with the same system prompt: its prefix is cached.
  let usage;
  const n = await llm.createSession({ system, ...o });
  for await (const c of n.promptStreaming("Are you open on Sunday?")) if (c.done) usage = c.usage;
  const sysTokens = await llm.countTokens([{ role: "system", content: system }]);
  // One reply at a time per model: another session's prompt meanwhile is Busy.
  const it = a.promptStreaming("Thanks!")[Symbol.asyncIterator]();
  await it.next();
  const busy = await b.prompt("Hi").then(() => "no error", (e) => `${e.code}: ${e.message}`);
  await it.return();
  const saved = await a.save();
  const next = await a.prompt("And croissants?");
  a.destroy();
  const destroyed = await a.prompt("Hi").then(() => "no error", (e) => e.code);
  const measured = await b.measureContextUsage("How much is it?");
  return {
    first, cloned, again, original, appended, afterAppend, both, usage, sysTokens, busy, destroyed,
    saved: btoa(Array.from(saved, (x) => String.fromCharCode(x)).join("")), next,
    usageB: b.contextUsage, windowB: b.contextWindow, measured,
  };
}


/** The checks of `sessionRun`'s result, whatever the entry. */
export function checkSessions(r) {
  assert.ok(r.first.length > 0);
  assert.equal(r.cloned, r.again, "the clone writes what a fresh session with its history does");
  assert.equal(r.original, r.cloned, "and the original what its clone did");
  assert.equal(r.afterAppend, r.both, "append then prompt is one prompt of both");
  // sysTokens (countTokens of the system prompt) counts the assistant's opened turn
  // too: a few tokens more than the system prompt a prefill keeps.
  assert.ok(r.appended.computedTokens > 0 && r.appended.cachedTokens >= r.sysTokens - 6, `${JSON.stringify(r.appended)} of ${r.sysTokens}`);
  assert.match(r.busy, /^Busy: /);
  assert.equal(r.destroyed, "Disposed");
  assert.ok(r.measured > r.usageB && r.usageB > r.sysTokens, `${r.usageB} then ${r.measured}`);
  assert.equal(r.windowB, r.info.contextWindow);
}

/** `sessionRun` on the page's shared model, with its stats and info. */
export async function sessionsOnPage([run, system]) {
  llm.reset();
  const out = await eval(`(${run})`)(llm, system);
  return { ...out, stats: llm.stats(), info: llm.info() };
}

/** The prefix cache's part of a `sessionsOnPage` result (a model with a cache). */
export function checkPrefixCache(r) {
  assert.ok(r.usage.cachedTokens >= r.sysTokens - 6, `the system prompt's ${r.sysTokens} tokens were cached (${r.usage.cachedTokens})`);
  assert.ok(r.stats.prefixCache.entries >= 1 && r.stats.prefixCache.restoredTokens > 0, JSON.stringify(r.stats.prefixCache));
  assert.ok(r.stats.prefixCache.bytes <= r.stats.prefixCache.budget);
}

/** In a new page: `saved` (base64) restored into a freshly loaded model; what it
 * writes next, and the refusals of another KV format and of damaged bytes. */
export async function restoreOnPage([url, saved]) {
  const bytes = Uint8Array.from(atob(saved), (c) => c.charCodeAt(0));
  const llm = await Pippin.load(url, { cache: false });
  const s = await llm.restoreSession(bytes);
  const text = await s.prompt("And croissants?");
  const f32 = await Pippin.load(url, { cache: false, kvCache: "f32", threads: 1 });
  const refused = await f32.restoreSession(bytes).then(() => "no error", (e) => `${e.code}: ${e.message}`);
  const damaged = bytes.slice();
  damaged[damaged.length - 100] ^= 1;
  const broken = await llm.restoreSession(damaged).then(() => "no error", (e) => `${e.code}: ${e.message}`);
  const still = await s.prompt("Thank you.");
  await f32.dispose();
  await llm.dispose();
  return { text, refused, broken, still };
}

export function checkRestore(r, saved) {
  assert.equal(r.text, saved.next, "the restored session writes what the saved one did");
  assert.match(r.refused, /^BadOptions: .*another model/);
  assert.match(r.broken, /^BadOptions: .*damaged/);
  assert.ok(r.still.length > 0, "the model goes on after a refused restore");
}
