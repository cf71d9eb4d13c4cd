// The built npm package (pkg/) used by a web page the way an app would, in Debian's
// headless Chromium with WebGPU (SwiftShader): load the default model from a URL with
// progress, stream replies, abort and continue, and the error cases. SwiftShader is a
// software adapter, so "auto" runs the shared model on the CPU backend; the WebGPU
// backend is asked for by name where it is what a test checks.
import assert from "node:assert/strict";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { test, root, MODEL, FLAGS, pages } from "./page.mjs";
import { SYSTEM, sessionRun, sessionsOnPage, checkSessions, checkPrefixCache, restoreOnPage, checkRestore } from "./sessions.mjs";
import { checkPromptApiInBothEntries } from "./prompt-api.mjs";
import { logprobsReference, logprobsOnPage, checkLogprobs } from "./logprobs.mjs";
import { floodedOnPage, checkFlooded } from "./threads.mjs";

const SPLIT_FIRST = "/models/fixtures/split/SmolLM2-135M-Instruct-00001-of-00003.gguf";

let base, page, browser;
const pg = pages(async (s) => {
  ({ base, page, browser } = s);
  // The model is loaded once and shared by the tests below.
  const progress = await page.evaluate(async (url) => {
    const seen = [];
    window.llm = await Pippin.load(url, { cache: false, onProgress: (p) => seen.push(p) });
    window.loadStats = llm.stats();
    return seen;
  }, MODEL);
  assert.equal(progress[0].phase, "download");
  assert.equal(progress.at(-1).phase, "ready");
  const uploads = progress.filter((p) => p.phase === "upload");
  assert.ok(uploads.length > 10, "upload progress is reported as bytes arrive");
  assert.ok(uploads.every((p, i) => i === 0 || p.loaded >= uploads[i - 1].loaded));
  assert.equal(uploads.at(-1).total, 98362432);
});
const consoleErrors = pg.errors;
const open = (args) => pg.open(args);

test("streams the reference greedy continuation", async () => {
  const r = await page.evaluate(async () => {
    const chunks = [];
    for await (const c of llm.generate("The capital of France is", { maxTokens: 4 })) chunks.push(c);
    return chunks;
  });
  const text = r.filter((c) => !c.done).map((c) => c.text).join("");
  assert.equal(text, " Paris.\n\n");
  const last = r.at(-1);
  assert.equal(last.done, true);
  assert.equal(last.finishReason, "length");
  assert.equal(last.usage.generatedTokens, 4);
  assert.ok(r.slice(0, -1).every((c) => typeof c.tokenId === "number" && c.text.length > 0));
});

test("a KV cache or RoPE table over the GPU's binding limit is refused (DeviceLimits) before the weights download", async () => {
  const r = await page.evaluate(async (url) => {
    let loaded = 0;
    const onProgress = (p) => p.phase === "upload" && (loaded = Math.max(loaded, p.loaded));
    const gpuLimits = { maxStorageBufferBindingSize: 1 << 20 };
    try {
      await Pippin.load(url, { cache: false, backend: "webgpu", maxContext: 8192, gpuLimits, onProgress });
      return { loaded };
    } catch (e) {
      return { loaded, name: e.name, code: e.code, message: e.message };
    }
  }, MODEL);
  assert.equal(r.name, "PippinError");
  assert.equal(r.code, "DeviceLimits");
  assert.match(r.message, /a RoPE table needs one buffer of 2\.0 MiB.*1\.0 MiB at maxContext 8192: a maxContext of at most 4096 fits/);
  assert.ok(r.loaded < 8 << 20, `${r.loaded} bytes of the 98 MB file read before the refusal`);
});

test("memory: a small wasm heap while loading, GPU memory by kind, and load/dispose cycles leak nothing", async (t) => {
  // The heap a WebGPU load adds beside the shared model (CPU backend: its weights are
  // in the heap): the peak since the load began, less what was live before it.
  const r = await page.evaluate(async (url) => {
    const cycles = [];
    let first;
    for (let i = 0; i < 3; i++) {
      const before = llm.stats().wasmHeapBytes;
      const m = await Pippin.load(url, { cache: false, backend: "webgpu" });
      first ??= m.stats();
      const peak = m.stats().wasmHeapPeakBytes - before;
      await m.dispose();
      const s = llm.stats();
      cycles.push({ peak, heap: s.wasmHeapBytes, memory: s.wasmMemoryBytes });
    }
    return { first, cycles };
  }, MODEL);
  const MiB = 1 << 20;
  const s = r.first;
  t.diagnostic(`first load: ${JSON.stringify(s)}; cycles: ${JSON.stringify(r.cycles)}`);
  assert.ok(s.wasmMemoryBytes >= s.wasmHeapPeakBytes);
  assert.equal(s.gpuBytes.weights, s.weightBytes);
  assert.equal(s.gpuBytes.kvCache, s.kvCacheBytes);
  assert.ok(s.gpuBytes.scratch > 0);
  assert.equal(s.gpuBytes.adapters, 0);
  for (const c of r.cycles) assert.ok(c.peak > 0 && c.peak <= 64 * MiB, `heap peak ${c.peak} bytes while loading a 98 MB file`);
  const [, a, b] = r.cycles;
  assert.ok(Math.abs(b.heap - a.heap) <= MiB, `heap after a load and dispose: ${a.heap} then ${b.heap} bytes`);
  // The linear memory may still grow a little with fragmentation, not by a model.
  assert.ok(b.memory - a.memory <= 8 * MiB, `wasm memory ${a.memory} then ${b.memory} bytes`);
});

test("a palettized model (pippin convert, mixed 2/4-bit) streams what the CPU reference does", async () => {
  // Written by tests/suite/palettized.rs, which the native suite runs first.
  const dir = path.join(root, "target/test-palettized");
  const expected = JSON.parse(fs.readFileSync(path.join(dir, "mixed.expected.json"), "utf8"));
  const text = await page.evaluate(async ({ url, prompt, maxTokens }) => {
    const pal = await Pippin.load(url, { cache: false, kvCache: "f32" });
    try {
      let out = "";
      for await (const c of pal.generate(prompt, { maxTokens })) if (!c.done) out += c.text;
      return out;
    } finally {
      pal.dispose();
    }
  }, { url: "/target/test-palettized/mixed.gguf", ...expected });
  assert.equal(text, expected.text);
});

test("a reply is also a ReadableStream", async () => {
  const text = await page.evaluate(async () => {
    const reader = llm.generate("The capital of France is", { maxTokens: 2 }).stream().getReader();
    let s = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return s;
      s += value.text;
    }
  });
  assert.equal(text, " Paris.");
});

test("abort mid-stream stops within a step, and the model goes on", async () => {
  const r = await page.evaluate(async () => {
    const ctl = new AbortController();
    const chunks = [];
    for await (const c of llm.generate("Once upon a time", { maxTokens: 50, signal: ctl.signal })) {
      chunks.push(c);
      if (chunks.length === 2) ctl.abort();
    }
    const after = await llm.generate("The capital of France is", { maxTokens: 2 }).text();
    return { chunks, after };
  });
  assert.equal(r.chunks.at(-1).finishReason, "abort");
  assert.ok(r.chunks.length <= 4, `stopped within a step (${r.chunks.length} chunks)`);
  assert.equal(r.after, " Paris.");
});

test("the page runs between the steps of a CPU reply (timers fire, input is handled)", async () => {
  const r = await page.evaluate(async () => {
    let ticks = 0;
    let on = true;
    const tick = () => {
      ticks++;
      if (on) setTimeout(tick, 0);
    };
    setTimeout(tick, 0);
    let chunks = 0;
    for await (const c of llm.generate("Once upon a time", { maxTokens: 8 })) if (!c.done) chunks++;
    on = false;
    return { ticks, chunks, backend: llm.info().backend };
  });
  assert.equal(r.backend, "cpu");
  // A CPU step is synchronous wasm: without a yield between steps the whole reply
  // would run before the first timer.
  assert.ok(r.ticks >= r.chunks / 2, `${r.ticks} timer ticks during ${r.chunks} steps`);
});

test("a second generate while one runs is rejected clearly", async () => {
  const msg = await page.evaluate(async () => {
    const a = llm.generate("Hello", { maxTokens: 3 })[Symbol.asyncIterator]();
    const first = a.next();
    try {
      await llm.generate("Hi", { maxTokens: 1 }).text();
      return "no error";
    } catch (e) {
      return why(e);
    } finally {
      await first;
      await a.return();
    }
  });
  assert.match(msg, /^Busy: .*already generating/);
});

test("a reply owns the model until it ends, in pippin and in pippin/worker", async () => {
  const r = await page.evaluate(async (url) => {
    const worker = await WorkerPippin.load(url, { cache: false });
    const out = {};
    for (const [name, m] of [["main", llm], ["worker", worker]]) {
      const err = (f) => Promise.resolve().then(f).then(() => "no error", why);
      // The rest of a reply read chunk by chunk: its text and why it ended.
      const drain = async (it) => {
        let text = "";
        for (;;) {
          const { value } = await it.next();
          if (value.done) return { text, finish: value.finishReason };
          text += value.text;
        }
      };
      await m.reset();
      // Long enough that pippin/worker, which streams ahead of its reader, is still
      // generating when the calls below arrive (the CPU backend writes ~15 tokens/s).
      const alone = await m.generate("The capital of France is", { maxTokens: 20 }).text();
      await m.reset();
      const ctlA = new AbortController();
      const a = m.generate("The capital of France is", { maxTokens: 20, signal: ctlA.signal })[Symbol.asyncIterator]();
      let text = (await a.next()).value.text;
      // Between two chunks: every call that would disturb the reply is refused.
      const refused = [
        await err(() => m.generate("Hello", { maxTokens: 2 }).text()),
        await err(() => m.chat([{ role: "user", content: "Hi" }], { maxTokens: 2 }).text()),
        await err(() => m.useAdapter(null)),
        await err(() => m.unloadAdapter("none")),
        await err(() => m.reset()),
        await err(() => m.dispose()),
      ];
      const rest = await drain(a);
      text += rest.text;
      const finish = rest.finish;
      // A finished reply's signal cannot stop the next one.
      const b = m.generate("Once upon a time", { maxTokens: 5 })[Symbol.asyncIterator]();
      await b.next();
      ctlA.abort();
      const bFinish = (await drain(b)).finish;
      // Letting go of a reply (break) frees the model.
      for await (const c of m.generate("Once upon a time", { maxTokens: 30 })) break;
      const after = await m.generate("The capital of France is", { maxTokens: 2 }).text();
      out[name] = { alone, text, finish, refused, bFinish, after };
    }
    await worker.dispose();
    return out;
  }, MODEL);
  for (const [name, o] of Object.entries(r)) {
    assert.equal(o.text, o.alone, `${name}: the reply wrote what it writes alone`);
    assert.equal(o.finish, "length", name);
    for (const msg of o.refused) assert.match(msg, /^Busy: .*already generating/, name);
    assert.equal(o.bFinish, "length", `${name}: a stale signal stopped nothing`);
    assert.equal(o.after, " Paris.", name);
  }
});

test("chat uses the template, reuses the KV cache, and reports stats and info", async () => {
  const r = await page.evaluate(async () => {
    llm.reset();
    const msgs = [{ role: "user", content: "What is the capital of France?" }];
    const reply = await llm.chat(msgs, { maxTokens: 12 }).text();
    msgs.push({ role: "assistant", content: reply }, { role: "user", content: "And of Italy?" });
    let usage;
    for await (const c of llm.chat(msgs, { maxTokens: 3 })) if (c.done) usage = c.usage;
    return { reply, usage, stats: llm.stats(), info: llm.info() };
  });
  assert.match(r.reply, /Paris/);
  assert.ok(r.usage.cachedTokens > 20, `turn 1 is reused (${r.usage.cachedTokens} cached tokens)`);
  assert.ok(r.stats.decodeTokensPerS > 0 && r.stats.weightBytes > 90e6 && r.stats.kvCacheBytes > 0);
  // The first text comes after the prompt's run, well before the reply's end.
  assert.ok(r.usage.timeToFirstTokenMs >= r.usage.prefillMs && r.usage.timeToFirstTokenMs < r.usage.prefillMs + r.usage.decodeMs + 1000, JSON.stringify(r.usage));
  assert.equal(r.stats.timeToFirstTokenMs, r.usage.timeToFirstTokenMs);
  // Load phases: the weights' stream within the whole load; no pipelines on the CPU.
  const { totalMs, weightsMs, headerCompileMs, compileMs } = r.stats.load;
  assert.ok(weightsMs > 0 && weightsMs <= totalMs && compileMs === 0 && headerCompileMs === 0, JSON.stringify(r.stats.load));
  // The CPU backend: weights in their quantized size, none on the GPU, split between
  // the threads' heaps: this one holds its share (and the whole small tensors).
  assert.equal(r.info.threads, 2);
  const share = r.stats.weightBytes / r.info.threads;
  assert.ok(r.stats.weightBytes < 100e6 && r.stats.wasmHeapBytes > share, JSON.stringify(r.stats));
  assert.equal(r.stats.gpuBytes.weights, 0);
  assert.equal(r.info.config.nLayers, 30);
  assert.equal(r.info.gpuAdapter, "");
  assert.equal(r.info.adapter, undefined, "\"adapter\" means LoRA adapters only");
});

test("bad sources are clear errors and the loaded model keeps working", async () => {
  const r = await page.evaluate(async () => {
    const err = (f) => Promise.resolve().then(f).then(() => "no error", why);
    // Aborted before it starts, and while the file streams in (both entries).
    const abortLoad = async (P) => {
      const ctl = new AbortController();
      const onProgress = (p) => p.loaded > 4e6 && ctl.abort();
      let name = "";
      const mid = await err(() =>
        P.load("/models/SmolLM2-135M-Instruct.Q4_1.gguf", { cache: false, signal: ctl.signal, onProgress }).catch((e) => {
          name = e.name;
          throw e;
        }),
      );
      return { before: await err(() => P.load("/models/none.gguf", { signal: AbortSignal.abort() })), mid, name };
    };
    return {
      missing: await err(() => Pippin.load("/models/missing.gguf", { cache: false })),
      truncated: await err(() => Pippin.load("/test/truncated.gguf", { cache: false })),
      garbage: await err(() => Pippin.load(new TextEncoder().encode("definitely not a model"))),
      source: await err(() => Pippin.load(42)),
      options: await err(() => llm.generate("x", { topP: 3 }).text()),
      context: await err(() => llm.generate("hello ".repeat(3000), { maxTokens: 1 }).text()),
      aborted: await abortLoad(Pippin),
      workerAborted: await abortLoad(WorkerPippin),
      workerMissing: await err(() => WorkerPippin.load("/models/missing.gguf", { cache: false })),
      still: await llm.generate("The capital of France is", { maxTokens: 2 }).text(),
    };
  });
  assert.match(r.missing, /^Download: .*HTTP 404/);
  assert.match(r.truncated, /^InvalidModel: .*(truncated|ends inside tensor)/);
  assert.match(r.garbage, /^InvalidModel: .*not a GGUF file/);
  assert.match(r.source, /^BadOptions: /);
  assert.match(r.options, /^BadOptions: .*top_p/);
  assert.match(r.context, /^ContextFull: .*context/);
  for (const a of [r.aborted, r.workerAborted]) {
    assert.match(a.before, /^Aborted: /);
    assert.match(a.mid, /^Aborted: /);
    assert.equal(a.name, "AbortError");
  }
  assert.match(r.workerMissing, /^Download: .*HTTP 404/, "codes cross from the worker");
  assert.equal(r.still, " Paris.");
});

test("a URL is kept in Cache Storage, listed and deleted", async () => {
  const r = await page.evaluate(async (url) => {
    const llm = await Pippin.load(url);
    const text = await llm.generate("The capital of France is", { maxTokens: 2 }).text();
    await llm.dispose();
    let disposed = "no error";
    try {
      llm.stats();
    } catch (e) {
      disposed = why(e);
    }
    await llm.dispose();
    // The copy is committed before load() resolves.
    const listed = await Pippin.cached();
    const again = await Pippin.load(url);
    const text2 = await again.generate("The capital of France is", { maxTokens: 2 }).text();
    await again.dispose();
    const deleted = await Pippin.deleteCached(new URL(url, location.href).href);
    return { text, text2, listed, deleted, after: await Pippin.cached(), disposed };
  }, MODEL);
  assert.equal(r.text, " Paris.");
  assert.match(r.disposed, /^Disposed: /);
  assert.equal(r.text2, " Paris.");
  assert.deepEqual(r.listed.map((c) => c.bytes), [98362432]);
  assert.equal(r.deleted, true);
  assert.deepEqual(r.after, []);
});

test("Cache Storage keeps only models that loaded, and a bad copy is evicted and downloaded again", async () => {
  const r = await page.evaluate(async (url) => {
    const err = async (f) => {
      try {
        await f();
        return "no error";
      } catch (e) {
        return e.message;
      }
    };
    const truncated = await err(() => Pippin.load("/test/truncated.gguf"));
    const htmlPage = await err(() => Pippin.load("/test/error-page.gguf"));
    const afterFailures = (await Pippin.cached()).map((c) => c.url);
    // A damaged copy in the cache (the size it claims, the wrong bytes).
    const href = new URL(url, location.href).href;
    const cache = await caches.open("pippin-models");
    await cache.put(href, new Response(new Uint8Array(4096), { headers: { "x-pippin-bytes": "4096" } }));
    const llm = await Pippin.load(url);
    const text = await llm.generate("The capital of France is", { maxTokens: 2 }).text();
    await llm.dispose();
    const listed = await Pippin.cached();
    await Pippin.deleteCached(href);
    return { truncated, htmlPage, afterFailures, text, listed };
  }, MODEL);
  assert.match(r.truncated, /truncated|ends inside tensor/);
  assert.match(r.htmlPage, /not a GGUF file/);
  assert.deepEqual(r.afterFailures, [], "failed loads leave nothing in the cache");
  assert.equal(r.text, " Paris.");
  assert.deepEqual(r.listed.map((c) => c.bytes), [98362432], "the damaged copy was replaced by the real file");
});

test("a cache write that fails (a full disk) loses only the copy: the model loads", async () => {
  const r = await page.evaluate(async (url) => {
    // As Chromium does under storage pressure: the put reads a little, cancels the
    // body and rejects.
    const put = Cache.prototype.put;
    Cache.prototype.put = async function (request, response) {
      const reader = response.body.getReader();
      await reader.read();
      await reader.cancel();
      throw new DOMException("Cache.put() encountered a network error", "NetworkError");
    };
    try {
      let ready;
      const m = await Pippin.load(url, { onProgress: (p) => p.phase === "ready" && (ready = p) });
      const text = await m.generate("The capital of France is", { maxTokens: 2 }).text();
      await m.dispose();
      const e = ready.cacheError;
      return { text, listed: (await Pippin.cached()).length, code: e?.code, typed: e instanceof PippinError, message: e?.message };
    } finally {
      Cache.prototype.put = put;
    }
  }, MODEL);
  assert.equal(r.text, " Paris.");
  assert.equal(r.listed, 0, "no partial copy is kept");
  assert.equal(r.code, "Storage", "the ready event says why the copy is not kept");
  assert.ok(r.typed);
  assert.match(r.message, /SmolLM2-135M-Instruct\.Q4_1\.gguf \(99 MB\) could not be kept in Cache Storage/);
});

test("a model over the storage left to the site loads from the network, not kept, and says so (Storage)", async () => {
  const r = await page.evaluate(async (url) => {
    await Pippin.evict(url);
    navigator.storage.estimate = async () => ({ quota: 50e6, usage: 10e6 });
    try {
      let ready;
      const m = await Pippin.load(url, { backend: "cpu", onProgress: (p) => p.phase === "ready" && (ready = p) });
      const text = await m.generate("The capital of France is", { maxTokens: 2 }).text();
      await m.dispose();
      const listed = (await Pippin.cached()).length;
      const e = ready.cacheError;
      return { text, listed, code: e?.code, message: e?.message, typed: e instanceof PippinError };
    } finally {
      delete navigator.storage.estimate;
    }
  }, MODEL);
  assert.equal(r.text, " Paris.");
  assert.equal(r.listed, 0);
  assert.equal(r.code, "Storage");
  assert.match(r.message, /\(99 MB\) could not be kept in Cache Storage: 40 MB of storage are left to this site/);
  assert.ok(r.typed);
});

test("a split model's files share the storage left: those that fit are kept, the next is said (Storage)", async () => {
  const r = await page.evaluate(async (path) => {
    const first = new URL(path, location.href).href;
    await Pippin.evict(first);
    // 90 MB left: the first two files (41 + 40 MB) fit, the third (17 MB) not beside them.
    navigator.storage.estimate = async () => ({ quota: 100e6, usage: 10e6 });
    try {
      let ready;
      const m = await Pippin.load(first, { backend: "cpu", onProgress: (p) => p.phase === "ready" && (ready = p) });
      await m.dispose();
      const listed = (await Pippin.cached()).map((c) => c.url.split("/").pop());
      await Pippin.evict(first);
      return { listed, code: ready.cacheError?.code, message: ready.cacheError?.message };
    } finally {
      delete navigator.storage.estimate;
    }
  }, SPLIT_FIRST);
  assert.deepEqual(r.listed.sort(), ["SmolLM2-135M-Instruct-00001-of-00003.gguf", "SmolLM2-135M-Instruct-00002-of-00003.gguf"]);
  assert.equal(r.code, "Storage");
  assert.match(r.message, /00003-of-00003\.gguf \(18 MB\) could not be kept in Cache Storage: 9 MB of storage are left/);
});

test("a download that breaks off resumes where it stopped (HTTP Range), or skips what it had from a server without Range", async () => {
  const r = await page.evaluate(async () => {
    const run = async (mode, cache) => {
      const id = `${mode}-${Math.random()}`;
      const url = new URL(`/test/flaky.gguf?mode=${mode}&run=${id}`, location.href).href;
      const m = await Pippin.load(url, { backend: "cpu", cache });
      const text = await m.generate("The capital of France is", { maxTokens: 2 }).text();
      await m.dispose();
      // The bytes kept are the file's, byte for byte.
      const copy = await caches.match(url);
      const digest = copy ? new Uint8Array(await crypto.subtle.digest("SHA-256", await copy.arrayBuffer())) : null;
      const sha256 = digest && Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
      let again = null;
      if (copy) {
        const c = await Pippin.load(url, { backend: "cpu" });
        again = await c.generate("The capital of France is", { maxTokens: 2 }).text();
        await c.dispose();
        await Pippin.evict(url);
      }
      return { text, sha256, again, log: await (await fetch(`/test/flaky-log?run=${id}`)).json() };
    };
    return { range: await run("range", true), norange: await run("norange", true) };
  });
  const want = crypto.createHash("sha256").update(fs.readFileSync(path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))).digest("hex");
  assert.equal(r.range.text, " Paris.");
  assert.equal(r.range.log.length, 2, JSON.stringify(r.range.log));
  assert.equal(r.range.log[0].range, null);
  const from = Number(/^bytes=(\d+)-$/.exec(r.range.log[1].range)?.[1]);
  // Where the engine had read to when Chromium errored the body (it drops what it had
  // buffered past that): somewhere before the 30 MB the server sent.
  assert.ok(from > 0 && from <= 30e6, `resumed from byte ${from}`);
  assert.equal(r.range.log[1].ifRange, '"smollm2-q4_1"');
  assert.equal(r.range.sha256, want, "the resumed download is cached whole, byte for byte");
  assert.equal(r.range.again, " Paris.", "and loads from the cache");
  assert.equal(r.norange.text, " Paris.");
  assert.equal(r.norange.log.length, 2);
  assert.match(r.norange.log[1].range, /^bytes=\d+-$/, "asked with Range, answered whole");
  assert.equal(r.norange.sha256, want, "the whole file sent again, its first bytes skipped: the same bytes");
  assert.equal(r.norange.again, " Paris.");
});



test("a split model (gguf-split files) loads from its first URL or its files in order, cached file by file", async () => {
  const r = await page.evaluate(async (dir) => {
    const name = (k) => new URL(`${dir}/SmolLM2-135M-Instruct-0000${k}-of-00003.gguf`, location.href).href;
    const text = async (m) => {
      let t = "";
      for await (const c of m.generate("The capital of France is", { maxTokens: 4 })) if (!c.done) t += c.text;
      await m.dispose();
      return t;
    };
    const err = async (f) => {
      try {
        await f();
        return null;
      } catch (e) {
        return { code: e.code, message: e.message };
      }
    };
    const seen = [];
    const byName = await text(await Pippin.load(name(1), { backend: "cpu", onProgress: (p) => seen.push(p) }));
    const cached = (await Pippin.cached()).filter((c) => c.url.includes("/split/"));
    const fromCache = await text(await Pippin.load(name(1), { backend: "cpu" }));
    const evicted = await Pippin.evict(name(1));
    const inOrder = await text(await Pippin.load([name(1), name(2), name(3)], { backend: "cpu", cache: false }));
    const inWorker = await text(await WorkerPippin.load([name(1), name(2), name(3)], { backend: "cpu", cache: false }));
    return {
      byName,
      fromCache,
      inOrder,
      inWorker,
      cached,
      upload: seen.filter((p) => p.phase === "upload").at(-1),
      missing: await err(() => Pippin.load([name(1), name(2)], { backend: "cpu", cache: false })),
      reordered: await err(() => Pippin.load([name(2), name(1), name(3)], { backend: "cpu", cache: false })),
      empty: await err(() => Pippin.load([], { cache: false })),
      after: (await Pippin.cached()).filter((c) => c.url.includes("/split/")).length,
      evicted,
    };
  }, "/models/fixtures/split");
  for (const t of [r.byName, r.fromCache, r.inOrder, r.inWorker]) assert.equal(t, " Paris.\n\n");
  const sizes = [41273984, 39905856, 17182912];
  assert.equal(r.upload.total, sizes[0] + sizes[1] + sizes[2], "one progress over every file");
  assert.deepEqual(r.cached.map((c) => c.bytes).sort(), [...sizes].sort(), "each file cached under its URL");
  assert.equal(r.after, 0, "evict(first URL) removes every file");
  assert.equal(r.evicted, true);
  assert.equal(r.missing.code, "BadOptions");
  assert.match(r.missing.message, /split into 3 files; 2 given/);
  assert.equal(r.reordered.code, "InvalidModel");
  assert.match(r.reordered.message, /shard 2 of 3.*00001-of-00003/);
  assert.equal(r.empty.code, "BadOptions");
});

test("Gemma 3 270M (Q4_K_M: Q5_0, Q8_0, Q4_K, Q6_K; SentencePiece) streams llama.cpp's greedy text", async () => {
  const r = await page.evaluate(async () => {
    const gemma = await Pippin.load("/models/gemma-3-270m-q4_k_m.gguf", { cache: false, maxContext: 256 });
    try {
      // llama.cpp's first six tokens, each decided by a margin over 1 logit.
      const count = await gemma.generate("One, two, three, four,", { maxTokens: 6 }).text();
      const chat = await gemma.chat([{ role: "user", content: "Say hi." }], { maxTokens: 4 }).text();
      return { count, chat, info: gemma.info() };
    } finally {
      gemma.dispose();
    }
  });
  assert.equal(r.count, " five, six, seven,");
  assert.ok(r.chat.length > 0);
  assert.equal(r.info.config.arch, "gemma3");
  assert.equal(r.info.config.slidingWindow, 512);
});

test("LoRA adapters: load from a URL, use per call, switch back to none mid-conversation, unload", async () => {
  const r = await page.evaluate(async () => {
    const opts = { maxTokens: 6 };
    llm.reset();
    const base = await llm.generate("Once upon a time", opts).text();
    await llm.loadAdapter("story", "/target/test-adapter");
    const listed = llm.adapters();
    const withAdapter = await llm.generate("Once upon a time", { ...opts, adapter: "story" }).text();
    const again = await llm.generate("Once upon a time", { ...opts, adapter: "story" }).text();
    const baseAgain = await llm.generate("Once upon a time", opts).text();
    // A conversation: turn 1 with the adapter, turn 2 back on the base model.
    llm.useAdapter("story");
    const msgs = [{ role: "user", content: "Tell me a story." }];
    const turn1 = await llm.chat(msgs, { maxTokens: 6 }).text();
    llm.useAdapter(null);
    msgs.push({ role: "assistant", content: turn1 }, { role: "user", content: "Shorter, please." });
    const turn2 = await llm.chat(msgs, { maxTokens: 4 }).text();
    const unloaded = llm.unloadAdapter("story");
    let missing = "";
    try {
      await llm.generate("x", { adapter: "story" }).text();
    } catch (e) {
      missing = why(e);
    }
    let bad = "";
    try {
      await llm.loadAdapter("bad", { config: { r: 4, lora_alpha: 8 }, weights: "/target/test-adapter/adapter_model.safetensors" });
    } catch (e) {
      bad = why(e);
    }
    return { base, listed, withAdapter, again, baseAgain, turn1, turn2, unloaded, after: llm.adapters(), missing, bad };
  });
  assert.equal(r.listed.length, 1);
  assert.equal(r.listed[0].name, "story");
  assert.equal(r.listed[0].rank, 8);
  assert.ok(r.listed[0].bytes > 1e6);
  assert.notEqual(r.withAdapter, r.base, "the adapter changes the text");
  assert.equal(r.again, r.withAdapter);
  assert.equal(r.baseAgain, r.base, "none is exactly the base model again");
  assert.ok(r.turn1.length > 0 && r.turn2.length > 0);
  assert.equal(r.unloaded, true);
  assert.deepEqual(r.after, []);
  assert.match(r.missing, /^BadOptions: .*no adapter named "story"/);
  assert.match(r.bad, /^BadOptions: .*config says rank 4/);
});

test("pippin/worker: the same API from a Web Worker", async () => {
  const r = await page.evaluate(async (url) => {
    let progressed = 0;
    const llm = await WorkerPippin.load(url, { cache: false, onProgress: () => progressed++ });
    const text = await llm.generate("The capital of France is", { maxTokens: 2 }).text();
    const info = await llm.info();
    await llm.dispose();
    const disposed = await llm.stats().then(() => "no error", why);
    return { text, progressed, layers: info.config.nLayers, disposed };
  }, MODEL);
  assert.equal(r.text, " Paris.");
  assert.match(r.disposed, /^Disposed: /);
  assert.ok(r.progressed > 2);
  assert.equal(r.layers, 30);
});

test("guided generation and OpenAI's chat API: JSON Schema, streaming, tools, bad formats", async () => {
  const r = await page.evaluate(async () => {
    llm.reset();
    // Guided generation's compiler is its own wasm, fetched on the first guided reply.
    const fetched = () => performance.getEntriesByType("resource").filter((e) => e.name.includes("pippin_guided_bg.wasm")).length;
    const fetchedBefore = fetched();
    const yesNo = { type: "object", properties: { answer: { enum: ["yes", "no"] } }, required: ["answer"], additionalProperties: false };
    const ask = [{ role: "user", content: "Is the sky blue?" }];
    const guided = await llm.chat(ask, { responseFormat: { type: "json_schema", schema: yesNo }, maxTokens: 16 }).text();
    const fetchedAfter = fetched();
    const completion = await llm.chat.completions.create({
      messages: ask,
      temperature: 0,
      max_tokens: 16,
      response_format: { type: "json_schema", json_schema: { name: "yes_no", schema: yesNo, strict: true } },
    });
    const chunks = [];
    for await (const c of await llm.chat.completions.create({ messages: ask, temperature: 0, max_tokens: 3, stream: true })) chunks.push(c);
    const plain = await llm.chat(ask, { maxTokens: 3 }).text();
    const weather = { type: "function", function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 } }, required: ["city"], additionalProperties: false } } };
    const toolChunks = [];
    const toolStream = await llm.chat.completions.create({
      messages: [{ role: "user", content: "What is the weather in Paris?" }],
      tools: [weather],
      tool_choice: "required",
      temperature: 0,
      max_tokens: 24,
      stream: true,
    });
    for await (const c of toolStream) toolChunks.push(c);
    // The call's result goes back as a tool message; the model answers in words.
    const tc = toolChunks.flatMap((k) => k.choices[0].delta.tool_calls ?? [])[0];
    const followUp = await llm.chat.completions.create({
      messages: [
        { role: "user", content: "What is the weather in Paris?" },
        { role: "assistant", content: null, tool_calls: tc ? [{ id: tc.id, type: "function", function: tc.function }] : [] },
        { role: "tool", tool_call_id: tc?.id ?? "none", content: "18 degrees and sunny" },
      ],
      tools: [weather],
      tool_choice: "none",
      temperature: 0,
      max_tokens: 12,
    });
    // Pippin's own API: the call ends the reply (no text), parsed.
    const direct = [];
    const named = { type: "function", function: { name: "get_weather" } };
    for await (const c of llm.chat([{ role: "user", content: "Weather in Rome?" }], { tools: [weather], toolChoice: named, maxTokens: 24 })) direct.push(c);
    const bad = await llm.chat(ask, { responseFormat: { type: "regex", pattern: "([a-z]" } }).text().then(() => null, why);
    const after = await llm.generate("The capital of France is", { maxTokens: 2 }).text();
    return { guided, completion, chunks, plain, toolChunks, followUp, direct, bad, after, fetchedBefore, fetchedAfter, fetchedEnd: fetched() };
  });
  assert.deepEqual([r.fetchedBefore, r.fetchedAfter, r.fetchedEnd], [0, 1, 1], "the guided module: not before the first guided reply, once after");
  assert.ok(["yes", "no"].includes(JSON.parse(r.guided).answer), r.guided);
  const c = r.completion;
  assert.equal(c.object, "chat.completion");
  assert.equal(c.choices[0].message.role, "assistant");
  assert.equal(c.choices[0].message.content, r.guided, "the same greedy reply through both APIs");
  assert.equal(c.choices[0].finish_reason, "stop");
  assert.ok(c.usage.prompt_tokens > 5 && c.usage.completion_tokens > 2 && c.usage.total_tokens === c.usage.prompt_tokens + c.usage.completion_tokens);
  assert.ok(r.chunks.every((k) => k.object === "chat.completion.chunk" && k.id === r.chunks[0].id));
  assert.equal(r.chunks[0].choices[0].delta.role, "assistant");
  assert.equal(r.chunks.map((k) => k.choices[0].delta.content ?? "").join(""), r.plain);
  assert.equal(r.chunks.at(-1).choices[0].finish_reason, "length");
  assert.equal(r.chunks.at(-1).usage.completion_tokens, 3);
  const calls = r.toolChunks.flatMap((k) => k.choices[0].delta.tool_calls ?? []);
  assert.equal(calls.length, 1, JSON.stringify(r.toolChunks));
  assert.equal(calls[0].function.name, "get_weather");
  assert.equal(typeof JSON.parse(calls[0].function.arguments).city, "string");
  assert.equal(r.toolChunks.at(-1).choices[0].finish_reason, "tool_calls");
  assert.ok(r.toolChunks.every((k) => !k.choices[0].delta.content), "a call is not streamed as content");
  const answer = r.followUp.choices[0];
  assert.equal(typeof answer.message.content, "string");
  assert.ok(answer.message.content.length > 0 && !answer.message.tool_calls, JSON.stringify(answer));
  assert.ok(["stop", "length"].includes(answer.finish_reason));
  assert.equal(r.direct.length, 1, JSON.stringify(r.direct));
  const end = r.direct[0];
  assert.equal(end.finishReason, "tool_calls");
  assert.equal(end.toolCalls[0].function.name, "get_weather");
  assert.equal(typeof end.toolCalls[0].function.arguments.city, "string");
  assert.match(r.bad, /^BadOptions: .*response format/);
  assert.equal(r.after, " Paris.", "the model goes on after a refused format");
});

test("pippin/worker: guided generation and chat.completions.create", async () => {
  const r = await page.evaluate(async (url) => {
    const w = await WorkerPippin.load(url, { cache: false });
    const ask = [{ role: "user", content: "Is the sky blue? Answer yes or no." }];
    const guided = await w.chat(ask, { responseFormat: { type: "regex", pattern: "(yes|no)" } }).text();
    const completion = await w.chat.completions.create({ messages: ask, temperature: 0, max_tokens: 8, response_format: { type: "json_object" } });
    const add = { type: "function", function: { name: "add", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"] } } };
    const called = await w.chat.completions.create({ messages: [{ role: "user", content: "What is 2 plus 3?" }], tools: [add], tool_choice: "required", temperature: 0, max_tokens: 24 });
    await w.dispose();
    return { guided, completion, called };
  }, MODEL);
  const call = r.called.choices[0];
  assert.equal(call.finish_reason, "tool_calls", JSON.stringify(call));
  assert.equal(call.message.content, null);
  assert.equal(call.message.tool_calls[0].function.name, "add");
  const args = JSON.parse(call.message.tool_calls[0].function.arguments);
  assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), JSON.stringify(args));
  assert.match(r.guided, /^(yes|no)$/);
  const content = r.completion.choices[0].message.content;
  if (r.completion.choices[0].finish_reason === "stop") assert.equal(typeof JSON.parse(content), "object");
  else assert.match(content, /^\{/);
});

test("pippin/worker: a guided module that cannot be fetched is a Download error, and the model goes on", async () => {
  const r = await page.evaluate(async (url) => {
    const w = await WorkerPippin.load(url, { cache: false, guidedWasmUrl: "/missing/pippin_guided_bg.wasm" });
    const ask = [{ role: "user", content: "Is the sky blue? Answer yes or no." }];
    const err = await w.chat(ask, { responseFormat: { type: "regex", pattern: "(yes|no)" } }).text().then(() => null, why);
    const after = await w.generate("The capital of France is", { maxTokens: 2 }).text();
    await w.dispose();
    return { err, after };
  }, MODEL);
  assert.match(r.err, /^Download: loading Pippin's guided-generation module .* failed/);
  assert.equal(r.after, " Paris.");
});

test("sessions: a clone continues as a fresh session would, append then prompt is one prompt, a common system prompt is cached, Busy between sessions", async () => {
  const r = await page.evaluate(sessionsOnPage, [sessionRun.toString(), SYSTEM]);
  checkSessions(r);
  checkPrefixCache(r);
  assert.equal(r.info.contextWindow, 2048);
  window_saved = r;
});

let window_saved;

test("sessions: a saved session restored in a new page writes what it would have; another format is refused", async () => {
  assert.ok(window_saved, "the sessions test ran first");
  const p = await browser.newPage();
  try {
    await p.goto(`${base}/pkg-tests/app.html`);
    await p.waitForFunction(() => window.ready);
    const r = await p.evaluate(restoreOnPage, [MODEL, window_saved.saved]);
    checkRestore(r, window_saved);
  } finally {
    await p.close();
  }
});

test("pippin/worker: sessions as in pippin, without a prefix cache the same text; overflow policies", async () => {
  const r = await page.evaluate(async ([url, run, system]) => {
    const llm = await WorkerPippin.load(url, { cache: false, sessionMemory: 0, maxContext: 256 });
    const out = await eval(`(${run})`)(llm, system);
    const stats = await llm.stats();
    const info = await llm.info();
    // Overflow: "error" refuses; "drop-oldest" drops the oldest turns after the system prompt.
    const long = "Tell me about sourdough starters, their feeding schedules, flours and temperatures. ".repeat(4);
    const e = await llm.createSession({ system, maxTokens: 4 });
    const full = await e.prompt(long.repeat(4)).then(() => "no error", (x) => x.code);
    const d = await llm.createSession({ system, maxTokens: 4, overflow: "drop-oldest" });
    let dropped = 0;
    let events = 0;
    d.oncontextoverflow = (ev) => (dropped += ev.droppedMessages);
    d.addEventListener("contextoverflow", () => events++);
    const turn = (i) => `Question ${i}: ${long}`;
    await d.prompt(turn(1));
    const beforeDrop = d.messages.length;
    await d.prompt(turn(2));
    // The third does not fit with the first: the first question and its answer go.
    await d.prompt(turn(3));
    const firstKept = d.messages[1].content;
    const tooLong = await d.prompt(long.repeat(4)).then(() => "no error", (x) => x.code);
    await llm.dispose();
    return { ...out, stats, info, full, dropped, events, beforeDrop, after: firstKept, tooLong, left: d.messages.length };
  }, [MODEL, sessionRun.toString(), SYSTEM]);
  const main = window_saved;
  checkSessions(r);
  for (const k of ["first", "cloned", "afterAppend", "next"]) assert.equal(r[k], main[k], `${k}: the same text without the prefix cache`);
  assert.equal(r.stats.prefixCache.entries, 0);
  assert.equal(r.stats.prefixCache.budget, 0);
  assert.equal(r.info.contextWindow, 256);
  assert.match(r.busy, /^Busy: /);
  assert.equal(r.full, "ContextFull");
  assert.equal(r.beforeDrop, 3);
  assert.equal(r.dropped, 2, "the first question and its answer");
  assert.equal(r.events, 1);
  assert.match(r.after, /^Question 2: /);
  assert.equal(r.left, 5);
  assert.equal(r.tooLong, "ContextFull");
});

test("pippin/prompt-api: an app written against Chrome's Prompt API runs unchanged on the polyfill, in pippin and pippin/worker", async () => {
  const open = async () => {
    const p = await browser.newPage();
    await p.goto(`${base}/pkg-tests/app.html`);
    await p.waitForFunction(() => window.ready);
    return p;
  };
  await checkPromptApiInBothEntries(open, MODEL);
});

test("OpenAI's logprobs, top_logprobs and logit_bias: llama.cpp's log-probabilities, the same text, in pippin and pippin/worker", async () => {
  const ref = logprobsReference();
  checkLogprobs(await page.evaluate(logprobsOnPage, [MODEL, ref.messages, ref.steps[0].id]), ref);
});

test("npm pack ships the whole package", () => {
  const out = execFileSync("npm", ["pack", "--dry-run", "--json"], { cwd: path.join(root, "pkg"), encoding: "utf8" });
  const files = JSON.parse(out)[0].files.map((f) => f.path);
  for (const f of ["package.json", "index.js", "index.d.ts", "openai.js", "reply.js", "session.js", "errors.js", "worker.js", "worker-host.js", "worker.d.ts", "prompt-api.js", "prompt-api.d.ts", "options.js", "pippin_wasm.js", "pippin_wasm_bg.wasm", "pippin_guided.js", "pippin_guided_bg.wasm"]) {
    assert.ok(files.includes(f), `${f} is in the tarball`);
  }
});

test("the engine's wasm is at most 3,066,000 bytes, without guided generation's compiler", () => {
  const engine = fs.readFileSync(path.join(root, "pkg/pippin_wasm_bg.wasm"));
  // 3,000,000 until sessions (the prefix cache, saved sessions: +42 KB, of which 22 KB
  // were won back by remapping the registry's paths in panic locations); 3,050,000
  // until the block written once (#57: the forwards as implementations of the
  // block's operations, +5.7 KB, to be won back); 3,060,000 until MXFP4 (a block
  // format of 32 more: its decode, SIMD dot and WGSL case, +1.9 KB); 3,062,000 until
  // the launchers checked their buffers' sizes (+3.5 KB); docs/javascript.md, Package size.
  assert.ok(engine.length <= 3_066_000, `pippin_wasm_bg.wasm is ${engine.length} bytes`);
  // llguidance's panic locations name its source files wherever its code is linked.
  assert.ok(!engine.includes("llguidance"), "llguidance is linked into the engine's wasm");
  assert.ok(fs.readFileSync(path.join(root, "pkg/pippin_guided_bg.wasm")).includes("llguidance"));
});

test("the page logged no errors but the expected 404 and dropped download", () => {
  const unexpected = consoleErrors.filter((e) => !/404/.test(e) && !/\/test\/flaky\.gguf/.test(e));
  assert.deepEqual(unexpected, []);
});

test("the CPU backend runs on every core where the page is isolated: the same text as one thread", async () => {
  const r = await page.evaluate(async (url) => {
    const prompt = "Once upon a time";
    const one = await Pippin.load(url, { cache: false, threads: 1 });
    const three = await Pippin.load(url, { cache: false, threads: 3 });
    try {
      const texts = [];
      for (const m of [one, llm, three]) texts.push(await m.generate(prompt, { maxTokens: 12 }).text());
      const chat = [{ role: "user", content: "What is the capital of France?" }];
      const chats = [await one.chat(chat, { maxTokens: 8 }).text(), await three.chat(chat, { maxTokens: 8 }).text()];
      const bad = await Pippin.load(url, { threads: 0 }).then(() => "no error", why);
      // pippin/worker: the lead in a worker (it blocks in Atomics.wait, a page spins).
      const worker = await WorkerPippin.load(url, { cache: false, threads: 2 });
      const inWorker = { text: await worker.generate(prompt, { maxTokens: 12 }).text(), info: await worker.info() };
      await worker.dispose();
      return { texts, chats, bad, inWorker, infos: [one.info(), llm.info(), three.info()], isolated: crossOriginIsolated };
    } finally {
      await one.dispose();
      await three.dispose();
    }
  }, MODEL);
  assert.equal(r.isolated, true);
  assert.deepEqual(r.infos.map((i) => i.threads), [1, 2, 3]);
  assert.match(r.infos[0].threadsReason, /threads: 1 was asked for/);
  assert.match(r.infos[1].threadsReason, /hardwareConcurrency is 2/);
  assert.equal(r.texts[1], r.texts[0]);
  assert.equal(r.texts[2], r.texts[0]);
  assert.ok(r.texts[0].length > 10, r.texts[0]);
  assert.equal(r.chats[1], r.chats[0]);
  assert.match(r.bad, /^BadOptions: threads must be an integer/);
  assert.equal(r.inWorker.info.threads, 2);
  assert.equal(r.inWorker.text, r.texts[0]);
});

test("speculative decoding: a reply that copies its input is the same text with and without, in fewer forwards (CPU backend, pippin and pippin/worker)", async () => {
  const r = await page.evaluate(async (url) => {
    const passage = "The Debian Project is an association of individuals who have made common cause to create a free operating system.";
    const chat = [{ role: "user", content: `Repeat this passage word for word:\n\n${passage}` }];
    async function reply(m, o) {
      let text = "", end;
      for await (const c of m.chat(chat, { maxTokens: 30, ...o })) c.done ? (end = c) : (text += c.text);
      return { text, usage: end.usage };
    }
    const runs = {};
    for (const speculation of ["on", "auto", "off"]) {
      runs[speculation] = [await reply(llm, { speculation }), await reply(llm, { speculation, temperature: 0.7, seed: 3 })];
    }
    const stats = llm.stats().speculation;
    const worker = await WorkerPippin.load(url, { cache: false, threads: 1 });
    try {
      const inWorker = await reply(worker, { speculation: "on" });
      const openai = await llm.chat.completions.create({ messages: chat, max_tokens: 30, temperature: 0, speculation: "off" });
      return { runs, stats, inWorker, openai: openai.choices[0].message.content };
    } finally {
      await worker.dispose();
    }
  }, MODEL);
  const [greedy, sampled] = r.runs.on;
  for (const [i, on] of [greedy, sampled].entries()) {
    const [auto, off] = [r.runs.auto[i], r.runs.off[i]];
    assert.equal(on.text, off.text, "speculation changes no token, seeded sampling included");
    assert.equal(auto.text, off.text);
    const a = auto.usage.speculation;
    assert.equal(a.forwards + a.accepted, off.usage.speculation.forwards, JSON.stringify(a));
    assert.equal(on.usage.generatedTokens, off.usage.generatedTokens);
    const s = on.usage.speculation;
    assert.equal(off.usage.speculation.proposed, 0);
    assert.ok(s.accepted > 0 && s.accepted <= s.proposed, JSON.stringify(s));
    assert.equal(s.forwards + s.accepted, off.usage.speculation.forwards, "each kept guess is a forward saved");
  }
  assert.match(greedy.text, /common cause/);
  assert.ok(greedy.usage.speculation.forwards * 2 < greedy.usage.generatedTokens, JSON.stringify(greedy.usage));
  assert.deepEqual(r.stats, r.runs.off[1].usage.speculation, "stats() reports the last reply's");
  assert.equal(r.inWorker.text, greedy.text);
  assert.ok(r.inWorker.usage.speculation.accepted > 0);
  assert.equal(r.openai, greedy.text);
});

test("speculative decoding with a draft model: the same text in fewer forwards; another vocabulary is BadOptions", async () => {
  const r = await page.evaluate(async ({ url, draft, other }) => {
    const chat = [{ role: "user", content: "Write a short story about a lighthouse keeper." }];
    async function reply(m, o) {
      let text = "", end;
      for await (const c of m.chat(chat, { maxTokens: 24, ...o })) c.done ? (end = c) : (text += c.text);
      return { text, usage: end.usage };
    }
    const phases = new Set();
    const m = await Pippin.load(url, { backend: "cpu", threads: 1, cache: false, draft, onProgress: (p) => phases.add(p.phase) });
    const runs = [];
    try {
      for (const o of [{}, { temperature: 0.8, seed: 4 }]) {
        runs.push([await reply(m, { speculation: "on", ...o }), await reply(m, { speculation: "off", ...o })]);
      }
      const info = m.info();
      let refused;
      await Pippin.load(url, { backend: "cpu", threads: 1, cache: false, draft: other }).catch((e) => (refused = `${e.code}: ${e.message}`));
      return { runs, info: { draft: info.draft, draftReason: info.draftReason }, phases: [...phases], refused, after: (await reply(m, {})).text };
    } finally {
      await m.dispose();
    }
  }, { url: MODEL, draft: "/models/fixtures/SmolLM2-135M-Instruct.Q2_K.gguf", other: "/models/gemma-3-270m-q4_k_m.gguf" });
  assert.equal(r.info.draft, true, "info() says a draft proposes");
  assert.equal(r.info.draftReason, undefined);
  assert.ok(r.phases.includes("draft"), r.phases.join());
  for (const [on, off] of r.runs) {
    assert.equal(on.text, off.text, "the draft changes no token, seeded sampling included");
    const s = on.usage.speculation;
    assert.ok(s.accepted > 0 && s.accepted <= s.proposed, JSON.stringify(s));
    assert.equal(s.forwards + s.accepted, off.usage.speculation.forwards, "each kept guess is a forward saved");
  }
  assert.match(r.refused, /^BadOptions: .*vocabulary/);
  assert.equal(r.after, r.runs[0][1].text, "the model with its draft goes on");
});

test("a CPU worker thread that dies fails the reply with DeviceLost, without a hang", async () => {
  const r = await page.evaluate(async (url) => {
    const m = await Pippin.load(url, { cache: false, threads: 2 });
    try {
      const before = await m.generate("The capital of France is", { maxTokens: 2 }).text();
      teamOf(m).exit(1);
      const t0 = performance.now();
      const lost = await m.generate("Once upon a time", { maxTokens: 4 }).text().then(() => "no error", why);
      const ms = performance.now() - t0;
      const again = await m.generate("Hello", { maxTokens: 2 }).text().then(() => "no error", why);
      const shared = await llm.generate("The capital of France is", { maxTokens: 2 }).text();
      return { before, lost, ms, again, shared };
    } finally {
      await m.dispose();
    }
  }, MODEL);
  assert.equal(r.before, " Paris.");
  assert.match(r.lost, /^DeviceLost: a CPU worker thread failed \(a worker did not answer within 5000 ms\); load the model again/);
  assert.ok(r.ms < 30_000, `${r.ms} ms`);
  assert.match(r.again, /^DeviceLost: /);
  assert.equal(r.shared, " Paris.", "other models are untouched");
});

test("a CPU helper thread woken without a new round serves nothing: the text is the same while the team's words are flooded with wake-ups", async () => {
  checkFlooded(await page.evaluate(floodedOnPage, MODEL));
});

test("a page that is not cross-origin isolated runs one thread and says why", async () => {
  const p = await browser.newPage();
  try {
    await p.goto(`${base}/plain/pkg-tests/app.html`);
    await p.waitForFunction(() => window.ready);
    const r = await p.evaluate(async (url) => {
      const m = await Pippin.load(url, { cache: false, backend: "cpu" });
      const text = await m.generate("The capital of France is", { maxTokens: 4 }).text();
      const info = m.info();
      await m.dispose();
      return { text, info, isolated: crossOriginIsolated };
    }, MODEL);
    assert.equal(r.isolated, false);
    assert.equal(r.text, " Paris.\n\n");
    assert.equal(r.info.threads, 1);
    assert.match(r.info.threadsReason, /not cross-origin isolated.*Cross-Origin-Opener-Policy: same-origin/);
  } finally {
    await p.close();
  }
});

