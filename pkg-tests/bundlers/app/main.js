// A user's app: both entries, imported by their bare names from the installed tarball.
// ?model=URL&prompt=TEXT&n=TOKENS; the result (or the error's code and message) is
// left in window.result for the test.
import { Pippin, PippinError } from "pippin";
import { Pippin as WorkerPippin } from "pippin/worker";

const q = new URLSearchParams(location.search);

async function greedy(P) {
  const llm = await P.load(q.get("model"), { cache: false, maxContext: 64 });
  try {
    const ids = [];
    for await (const c of llm.generate(q.get("prompt"), { maxTokens: Number(q.get("n")) })) if (!c.done) ids.push(c.tokenId);
    // Guided generation's compiler is a second wasm module the engine fetches on this
    // first guided reply: the build must have emitted it (a lazy chunk and its wasm).
    const guided = await llm.generate("Is Paris in France? Answer yes or no:", { maxTokens: 4, responseFormat: { type: "regex", pattern: "(yes|no)" } }).text();
    // On a cross-origin isolated page the build must also have emitted the CPU
    // backend's thread worker (info().threadsReason says when it did not start).
    const { threads, threadsReason } = await llm.info();
    return { ids, guided, threads, threadsReason, isolated: crossOriginIsolated };
  } finally {
    await llm.dispose();
  }
}

window.result = (async () => ({ main: await greedy(Pippin), worker: await greedy(WorkerPippin) }))().catch((e) => ({
  error: e instanceof PippinError ? `${e.code}: ${e.message}` : String(e?.stack ?? e),
}));
