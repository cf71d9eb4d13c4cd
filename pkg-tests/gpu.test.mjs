// The built package's WebGPU backend used by a web page, in Debian's headless Chromium
// with WebGPU (SwiftShader), and the package without WebGPU: each test loads its own
// models (no model shared between tests). Apart from app.test.mjs because SwiftShader
// and a page's wasm each keep one core busy: node runs the two files side by side.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test, root, MODEL, FLAGS, pages } from "./page.mjs";

let page;
const pg = pages(async (s) => ({ page } = s));
const open = (args) => pg.open(args);

test("the WebGPU backend (asked for; SwiftShader here) streams the reference continuation too", async () => {
  const r = await page.evaluate(async (url) => {
    const m = await Pippin.load(url, { cache: false, backend: "webgpu" });
    try {
      let text = "";
      for await (const c of m.generate("The capital of France is", { maxTokens: 4 })) if (!c.done) text += c.text;
      // "auto" beside it: the backend a model gets when none is asked for.
      const auto = await Pippin.load(url, { cache: false });
      const shared = auto.info();
      await auto.dispose();
      return { text, info: m.info(), stats: m.stats(), shared, capped: await capped(url) };
    } finally {
      await m.dispose();
    }
    // As a GPU whose bindings hold 256 KiB runs it: every matrix in parts (the embedding,
    // also the head, in 109), all parts of a matrix sharing one pipeline (~35 s here).
    async function capped(url) {
      const m = await Pippin.load(url, { cache: false, backend: "webgpu", maxContext: 512, gpuLimits: { maxStorageBufferBindingSize: 256 << 10 } });
      try {
        let text = "";
        for await (const c of m.generate("The capital of France is", { maxTokens: 4 })) if (!c.done) text += c.text;
        return { text, info: m.info(), stats: m.stats() };
      } finally {
        await m.dispose();
      }
    }
  }, MODEL);
  assert.equal(r.text, " Paris.\n\n");
  assert.equal(r.capped.text, r.text, "the same text with every matrix split across 256 KiB bindings");
  assert.equal(r.capped.info.maxStorageBufferBindingSize, 256 << 10);
  assert.ok(r.capped.stats.dispatchesPerToken > r.stats.dispatchesPerToken, "split matrices are more dispatches");
  const load = r.stats.load;
  assert.ok(load.compileMs > 0 && load.weightsMs > 0 && load.weightsMs + load.compileMs <= load.totalMs, JSON.stringify(load));
  // The pipelines were created from the header, within the weights' phase.
  assert.ok(load.headerCompileMs > 0 && load.headerCompileMs < load.weightsMs, JSON.stringify(load));
  assert.equal(r.info.backend, "webgpu");
  assert.match(r.info.backendReason, /asked for/);
  assert.equal(typeof r.info.gpuAdapter, "string");
  assert.ok(r.info.maxStorageBufferBindingSize > 0, "a WebGPU device's limits");
  // "auto" on a software adapter: the CPU backend, and why.
  assert.equal(r.shared.backend, "cpu");
  assert.match(r.shared.backendReason, /software/);
});

test("memory: a 500 MB model loads within 64 MiB of wasm heap", async (t) => {
  // In a browser of its own: SwiftShader's GPU process can stay busy long after half a
  // gigabyte of buffers is freed (a later requestAdapter then waits), and that must
  // not reach the other tests' page.
  const [b, p] = await open(["--enable-unsafe-webgpu", ...FLAGS]);
  try {
    // Written by `pippin make-large` (scripts/test): a 410 MB f32 embedding, 2 layers.
    const s = await p.evaluate(async () => {
      const m = await Pippin.load("/target/large-synthetic.gguf", { cache: false, maxContext: 64, backend: "webgpu" });
      const s = m.stats();
      await m.dispose();
      return s;
    });
    t.diagnostic(`large model: ${JSON.stringify(s)}`);
    const MiB = 1 << 20;
    assert.ok(s.gpuBytes.weights >= 400 * MiB, `${s.gpuBytes.weights} bytes of weights`);
    // Nothing else is loaded in this page: the peak is all the load's.
    assert.ok(s.wasmHeapPeakBytes <= 64 * MiB, `heap peak ${s.wasmHeapPeakBytes} bytes`);
  } finally {
    await b.close();
  }
});

test("a recovered model (pippin convert --recover: 4-bit palettes + recovery adapter in one file) streams the reference's text on both backends", async () => {
  // Written by tests/suite/recover.rs, which the native suite runs first.
  const dir = path.join(root, "target/test-recovered");
  const expected = JSON.parse(fs.readFileSync(path.join(dir, "recovered.expected.json"), "utf8"));
  for (const backend of ["webgpu", "cpu"]) {
    const r = await page.evaluate(async ({ url, prompt, maxTokens, backend }) => {
      const m = await Pippin.load(url, { cache: false, kvCache: "f32", backend });
      try {
        let out = "";
        const lps = [];
        for await (const c of m.generate(prompt, { maxTokens, logprobs: 1 })) {
          if (!c.done) out += c.text;
          for (const l of c.logprobs ?? []) lps.push(l.logprob);
        }
        const info = m.info();
        return { out, lps, recovery: info.recovery, backend: info.backend };
      } finally {
        m.dispose();
      }
    }, { url: "/target/test-recovered/recovered.gguf", backend, ...expected });
    assert.equal(r.backend, backend);
    assert.equal(r.recovery?.rank, 16, JSON.stringify(r.recovery));
    assert.equal(r.out, expected.text, backend);
    // The adapter runs: each token's log-probability is the reference's with it,
    // nearer than to the reference's without it.
    assert.equal(r.lps.length, expected.logprobs.length, JSON.stringify(r.lps));
    const off = (want) => r.lps.reduce((s, lp, i) => s + Math.abs(lp - want[i]), 0);
    r.lps.forEach((lp, i) => assert.ok(Math.abs(lp - expected.logprobs[i]) < 0.1, `${backend} token ${i}: ${lp} vs ${expected.logprobs[i]}`));
    assert.ok(off(expected.logprobs) < off(expected.logprobsWithout), `${backend}: ${r.lps}`);
  }
});

test("speculative decoding on WebGPU: a copying reply is the same text with and without, in fewer forwards", async () => {
  const r = await page.evaluate(async (url) => {
    const passage = "The Debian Project is an association of individuals who have made common cause to create a free operating system.";
    const chat = [{ role: "user", content: `Repeat this passage word for word:\n\n${passage}` }];
    const m = await Pippin.load(url, { cache: false, backend: "webgpu", maxContext: 512 });
    async function reply(speculation) {
      let text = "", end;
      for await (const c of m.chat(chat, { maxTokens: 12, speculation })) c.done ? (end = c) : (text += c.text);
      return { text, usage: end.usage };
    }
    try {
      return { on: await reply("on"), off: await reply("off"), backend: m.info().backend };
    } finally {
      await m.dispose();
    }
  }, MODEL);
  assert.equal(r.backend, "webgpu");
  assert.equal(r.on.text, r.off.text, "speculation changes no token");
  assert.match(r.on.text, /Debian Project/);
  const s = r.on.usage.speculation;
  assert.equal(r.off.usage.speculation.proposed, 0);
  assert.ok(s.accepted > 0 && s.accepted <= s.proposed, JSON.stringify(s));
  assert.ok(s.forwards < r.off.usage.speculation.forwards, `${JSON.stringify(s)} vs ${JSON.stringify(r.off.usage.speculation)}`);
});

test("without WebGPU the package runs on the CPU backend; asking for WebGPU says what to do", async () => {
  const [b, p] = await open(FLAGS);
  try {
    const r = await p.evaluate(async (url) => {
      const err = (f) => f().then(() => "no error", why);
      // Chromium on Linux without the flag: navigator.gpu is there, no adapter.
      const noAdapter = await err(() => Pippin.load("/models/none.gguf", { backend: "webgpu" }));
      const m = await Pippin.load(url, { cache: false });
      let text = "";
      for await (const c of m.generate("The capital of France is", { maxTokens: 4 })) if (!c.done) text += c.text;
      const info = m.info();
      await m.dispose();
      // A GPU process that never answers (hung or busy): the load is not held up
      // for longer than the package's bound.
      const gpu = navigator.gpu;
      gpu.requestAdapter = () => new Promise(() => {});
      const t0 = performance.now();
      const [hung, onCpu] = await Promise.all([
        err(() => Pippin.load("/models/none.gguf", { backend: "webgpu" })),
        Pippin.load(url, { cache: false }).then(async (h) => [h.info(), await h.dispose()][0]),
      ]);
      const hungMs = performance.now() - t0;
      // A browser without WebGPU at all.
      Object.defineProperty(navigator, "gpu", { value: undefined });
      const noWebGPU = await err(() => Pippin.load("/models/none.gguf", { backend: "webgpu" }));
      const cpu = await Pippin.load(url, { cache: false });
      const cpuInfo = cpu.info();
      await cpu.dispose();
      const badBackend = await err(() => Pippin.load(url, { backend: "gpu" }));
      return { noAdapter, noWebGPU, text, info, cpuInfo, badBackend, hung, onCpu, hungMs };
    }, MODEL);
    assert.match(r.noAdapter, /^NoAdapter: .*--enable-unsafe-webgpu/);
    assert.match(r.noWebGPU, /^NoWebGPU: .*Chrome or Edge 113\+/);
    assert.equal(r.text, " Paris.\n\n");
    assert.equal(r.info.backend, "cpu");
    assert.match(r.info.backendReason, /no adapter/);
    assert.equal(r.cpuInfo.backend, "cpu");
    assert.match(r.cpuInfo.backendReason, /not available/);
    assert.match(r.badBackend, /^BadOptions: backend must be/);
    assert.match(r.hung, /^NoAdapter: WebGPU gave no GPU adapter within 15 s/);
    assert.equal(r.onCpu.backend, "cpu");
    assert.match(r.onCpu.backendReason, /no adapter/);
    assert.ok(r.hungMs < 60_000, `${r.hungMs} ms`);
  } finally {
    await b.close();
  }
});

test("the pages logged no errors", () => {
  // The one expected: the file that does not exist, where a load gets as far as fetching it.
  assert.deepEqual(pg.errors.filter((e) => !(/404/.test(e) && /none\.gguf/.test(e))), []);
});
