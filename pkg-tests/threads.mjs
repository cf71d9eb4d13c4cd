// Page code and checks of the CPU backend's worker threads shared by the Chromium
// (app.test.mjs) and Firefox (firefox.test.mjs) tests.
import assert from "node:assert/strict";

/** In a page: a two-thread model's text, then the same text's while another worker
 * notifies the team's GEN and DONE words (0 and 1 of team.js) without pause. A round's
 * notify can reach a helper that already served it (the lead descheduled between
 * bumping GEN and notifying): a helper that served it again counted it done twice, and
 * the lead read the next round's outputs before they were written (seen in Firefox). */
export async function floodedOnPage(url) {
  const m = await Pippin.load(url, { cache: false, backend: "cpu", threads: 2 });
  const src = "onmessage = (e) => { const c = new Int32Array(e.data, 0, 16); postMessage(0); for (;;) { Atomics.notify(c, 0); Atomics.notify(c, 1); } };";
  const flood = new Worker(URL.createObjectURL(new Blob([src], { type: "text/javascript" })));
  try {
    const prompt = "The three largest cities of France are";
    const quiet = await m.generate(prompt, { maxTokens: 24 }).text();
    await new Promise((ok) => {
      flood.onmessage = ok;
      flood.postMessage(teamOf(m).sab);
    });
    const flooded = await m.generate(prompt, { maxTokens: 24 }).text();
    return { quiet, flooded, threads: m.info().threads };
  } finally {
    flood.terminate();
    await m.dispose();
  }
}

/** The checks of `floodedOnPage`'s result. */
export function checkFlooded(r) {
  assert.equal(r.threads, 2);
  assert.ok(r.quiet.length > 20, r.quiet);
  assert.equal(r.flooded, r.quiet, "wake-ups without a round change nothing");
}
