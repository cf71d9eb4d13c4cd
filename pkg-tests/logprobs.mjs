// Page code and checks of log-probabilities and logit biases (OpenAI's logprobs,
// top_logprobs, logit_bias) shared by the Chromium (app.test.mjs) and Firefox
// (firefox.test.mjs) tests, against llama.cpp's log-softmax along the default model's
// greedy reply (models/fixtures/smollm2-logprobs.json, scripts/lib/logprobs_reference.py).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** llama.cpp's log-probabilities (made by scripts/fetch-fixtures). */
export function logprobsReference() {
  return JSON.parse(fs.readFileSync(path.join(root, "models/fixtures/smollm2-logprobs.json"), "utf8"));
}

/** In the page: the reply with logprobs through pippin's chat and OpenAI's shape, and
 * through pippin/worker streamed, biased and refused. */
export const logprobsOnPage = async ([url, messages, banned]) => {
  const pieces = [];
  for await (const c of llm.chat(messages, { maxTokens: 8, logprobs: 5 })) if (!c.done) pieces.push(c);
  const params = { messages, temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 5 };
  const whole = await llm.chat.completions.create(params);
  const plain = await llm.chat.completions.create({ messages, temperature: 0, max_tokens: 8 });
  const w = await WorkerPippin.load(url, { cache: false });
  const chunks = [];
  for await (const c of await w.chat.completions.create({ ...params, stream: true })) chunks.push(c);
  const banning = { messages, temperature: 0, max_tokens: 2, logprobs: true, logit_bias: { [banned]: -100 } };
  const biased = await w.chat.completions.create(banning);
  const without = await w.chat.completions.create({ messages, top_logprobs: 3 }).then(() => "no error", (e) => e.code);
  const tooMany = await llm.chat.completions.create({ ...params, top_logprobs: 21 }).then(() => "no error", (e) => e.code);
  const outside = await w.chat.completions.create({ ...params, logit_bias: { 99999999: 1 } }).then(() => "no error", (e) => e.code);
  await w.dispose();
  return { pieces, whole, plain, chunks, biased, without, tooMany, outside };
};

/** The checks of `logprobsOnPage`'s result against llama.cpp's. */
export function checkLogprobs(r, ref) {
  const lps = r.pieces.flatMap((p) => p.logprobs ?? []);
  // One a token of text (the end-of-turn token that stops the reply has none).
  assert.ok(lps.length >= 6 && lps.length <= 8, `${lps.length}`);
  // Against llama.cpp, by token id, as the native test (tests/suite/logprobs.rs): the
  // tail below e^-5 is rounding's; sure tokens within 0.01, the rest within 0.3.
  let compared = 0;
  for (const [i, ours] of lps.entries()) {
    const theirs = ref.steps[i];
    assert.equal(ours.topLogprobs.length, 5);
    for (const alt of [ours, ...ours.topLogprobs]) {
      const t = theirs.top5.find(([id, lp]) => id === alt.tokenId && lp > -5);
      if (!t) continue;
      const tol = t[1] > -0.1 ? 0.01 : 0.3;
      assert.ok(Math.abs(alt.logprob - t[1]) <= tol, `step ${i} token ${alt.tokenId}: ${alt.logprob} vs llama.cpp's ${t[1]}`);
      compared++;
    }
    if (ours.tokenId !== theirs.id) break;
  }
  assert.ok(compared >= 12, `${compared} compared`);
  // OpenAI's shape: the same tokens and numbers, and the text of a reply without them.
  const content = r.whole.choices[0].logprobs.content;
  assert.equal(r.whole.choices[0].message.content, r.plain.choices[0].message.content);
  assert.equal(r.plain.choices[0].logprobs, null);
  assert.equal(content.map((c) => c.token).join(""), r.whole.choices[0].message.content);
  assert.deepEqual(content.map((c) => c.logprob), lps.map((l) => l.logprob));
  assert.deepEqual(content[0].top_logprobs.map((t) => t.token), lps[0].topLogprobs.map((t) => t.token));
  assert.deepEqual(content[0].bytes, [...Buffer.from(content[0].token)]);
  assert.equal(r.whole.choices[0].logprobs.refusal, null);
  // pippin/worker, streamed: the same log-probabilities, chunk by chunk.
  const streamed = r.chunks.flatMap((c) => c.choices[0].logprobs?.content ?? []);
  assert.deepEqual(streamed, content);
  // The greedy token banned: the runner-up, with its own (unbiased) log-probability.
  const first = r.biased.choices[0].logprobs.content[0];
  assert.notEqual(first.token, content[0].token);
  assert.ok(Math.abs(first.logprob - ref.steps[0].top5[1][1]) <= 0.3, `${first.logprob}`);
  assert.deepEqual(first.top_logprobs, []);
  assert.equal(r.without, "BadOptions");
  assert.equal(r.tooMany, "BadOptions");
  assert.equal(r.outside, "BadOptions");
}
