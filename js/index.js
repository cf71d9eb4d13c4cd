// Pippin's public JavaScript API: a small layer over the wasm-bindgen engine that
// adds what JavaScript developers expect — async iterators and ReadableStreams,
// AbortSignal, loading from URLs, Responses, Blobs and bytes, and Cache Storage.
import init, { Engine, setGuidedLoader } from "./pippin_wasm.js";
import { sessionMethods } from "./session.js";
import { Reply } from "./reply.js";
import { completionsFor } from "./openai.js";
import { PippinError, ERROR_CODES, asPippinError, loadAborted } from "./errors.js";
import { startTeam } from "./team.js";
import { generationOptions } from "./options.js";
import { CACHE, SIZE_HEADER, abortable, shardUrls, openSource, inFolder, adapterBytes } from "./source.js";

export { PippinError, ERROR_CODES };

let ready = null;

/** Instantiates the wasm once; a failure (the file not served) is retried next time. */
function initOnce(wasmUrl) {
  ready ??= init(wasmUrl ? { module_or_path: wasmUrl } : undefined)
    .then(() => setGuidedLoader(loadGuided))
    .catch((e) => {
      ready = null;
      throw new PippinError("Download", `Loading Pippin's wasm failed (see wasmUrl): ${e.message}`, { cause: e });
    });
  return ready;
}

let guided = null;
let guidedWasmUrl;

/** Guided generation's compiler, a second wasm module the engine asks for on its first
 * guided reply (responseFormat, tools): apps that never constrain a reply never
 * download it. A failed load is tried again next time. */
function loadGuided() {
  guided ??= import("./pippin_guided.js")
    .then(async (m) => {
      await m.default(guidedWasmUrl ? { module_or_path: guidedWasmUrl } : undefined);
      return m;
    })
    .catch((e) => {
      guided = null;
      throw e;
    });
  return guided;
}

const NO_WEBGPU =
  "WebGPU is not available in this browser. Pippin's WebGPU backend needs Chrome or Edge 113+ " +
  "(on Linux: chrome://flags/#enable-unsafe-webgpu or --enable-unsafe-webgpu), " +
  "Safari 26+, or Firefox 141+ on Windows; the page must be served over https or from localhost. " +
  'backend: "auto" (the default) or "cpu" runs on the CPU instead.';
const NO_ADAPTER =
  "WebGPU is available but gave no GPU adapter: the GPU may be blocklisted or disabled " +
  "(on Linux, Chrome needs chrome://flags/#enable-unsafe-webgpu or --enable-unsafe-webgpu). " +
  'backend: "auto" (the default) or "cpu" runs on the CPU instead.';

/** How long a load waits for a GPU adapter before it runs without one. */
const ADAPTER_MS = 15_000;
const ADAPTER_LATE =
  `WebGPU gave no GPU adapter within ${ADAPTER_MS / 1000} s (the browser's GPU process is hung or busy). ` +
  'backend: "auto" (the default) or "cpu" runs on the CPU instead.';

/** What this browser has of WebGPU: "missing", "noAdapter", "software" (a fallback or
 * CPU adapter such as SwiftShader) or "hardware". The engine picks the backend from it;
 * asking for "webgpu" where there is none is a clear PippinError here. */
async function probeWebGPU(backend) {
  if (!["auto", "webgpu", "cpu"].includes(backend)) {
    throw new PippinError("BadOptions", `backend must be "auto", "webgpu" or "cpu", not ${JSON.stringify(backend)}`);
  }
  if (backend === "cpu") return "missing";
  if (!globalThis.navigator?.gpu) {
    if (backend === "webgpu") throw new PippinError("NoWebGPU", NO_WEBGPU);
    return "missing";
  }
  let adapter = null;
  let late = false;
  try {
    // WebGPU lets requestAdapter take as long as it likes (a GPU process that
    // is hung or busy; one that was killed answers at once): a load must not wait
    // on it forever.
    let timer;
    const slow = new Promise((resolve) => {
      timer = setTimeout(() => {
        late = true;
        resolve(null);
      }, ADAPTER_MS);
    });
    adapter = await Promise.race([navigator.gpu.requestAdapter(), slow]).finally(() => clearTimeout(timer));
  } catch {
    adapter = null;
  }
  if (!adapter) {
    if (backend === "webgpu") throw new PippinError("NoAdapter", late ? ADAPTER_LATE : NO_ADAPTER);
    return "noAdapter";
  }
  // adapter.info is Chrome 127+; isFallbackAdapter was on the adapter itself before.
  const info = adapter.info ?? {};
  const names = `${info.architecture ?? ""} ${info.description ?? ""} ${info.vendor ?? ""}`;
  const fallback = Boolean(info.isFallbackAdapter ?? adapter.isFallbackAdapter);
  const software = fallback || /swiftshader|llvmpipe|lavapipe/i.test(names);
  return software ? "software" : "hardware";
}

/**
 * Loads `options.draft` (a model of the same vocabulary, as `source` of `load`) as the
 * draft of speculative decoding, on the CPU backend beside the model (one of another
 * vocabulary is refused once it has loaded). On the WebGPU
 * backend, which does not check guesses in one pass yet, it is not downloaded: the
 * result (`info().draft`, `info().draftReason`) says so.
 */
async function loadDraft(engine, options, signal) {
  if (options.draft == null) return { draft: false };
  if (engine.info().backend !== "cpu") {
    return { draft: false, draftReason: "the WebGPU backend does not check guesses in one pass yet: replies decode a token a forward" };
  }
  const src = await openSource(options.draft, { ...options, signal });
  const progress = options.onProgress;
  const onBytes = progress
    ? (loaded, size) => {
        const t = size || src.total || 0;
        progress({ phase: "draft", loaded, total: t, fraction: t ? Math.min(1, loaded / t) : 0 });
      }
    : undefined;
  let draft;
  try {
    const streams = [src.stream].flat().map((s) => abortable(s, options.signal));
    const engineOptions = { kvCache: options.kvCache, maxContext: options.maxContext, backend: "cpu" };
    draft = await Engine.load(streams, src.totals ?? [src.total], engineOptions, onBytes);
    engine.setDraft(draft);
  } catch (e) {
    await src.done(false);
    throw e;
  } finally {
    draft?.free();
  }
  await src.done(true);
  return { draft: true };
}

/** The low-level calls of a reply on a wasm engine (see reply.js); `engine()` is
 * looked up at each call, so a reply read after dispose() gets Disposed. */
function replyCalls(engine, start) {
  return {
    start,
    next: (id) => engine().next(id),
    abort: (id) => engine().abort(id),
    release: (id) => engine().release(id),
  };
}

const engines = new WeakMap();
const teams = new WeakMap();
const unowned = new FinalizationRegistry((team) => team.close());

/** What a disposed Pippin calls instead of its freed engine: every call throws. */
const DISPOSED = new Proxy(
  {},
  {
    get: () => () => {
      throw new PippinError("Disposed", "this model was disposed");
    },
  },
);

/** The wasm engine behind a Pippin (for pippin/worker's host; not public API). */
export function engineOf(pippin) {
  return engines.get(pippin);
}

/** The worker threads behind a Pippin, or undefined (for tests; not public API). */
export function teamOf(pippin) {
  return teams.get(pippin);
}

/** The threads of a CPU-backend load: helper workers where they can run and pay. */
function checkThreads(t) {
  if (t !== undefined && !(Number.isInteger(t) && t >= 1 && t <= 64)) {
    throw new PippinError("BadOptions", `threads must be an integer from 1 to 64, not ${JSON.stringify(t)}`);
  }
}

async function threadsFor(options, webgpu) {
  const t = options.threads;
  const backend = options.backend ?? "auto";
  if (backend === "webgpu" || (backend === "auto" && webgpu === "hardware")) {
    return { team: null, count: 1, reason: "the WebGPU backend runs the model" };
  }
  // The helpers resolve a relative wasmUrl against the page, as the lead does.
  const wasmUrl = options.wasmUrl ? new URL(options.wasmUrl, globalThis.location?.href).href : undefined;
  return startTeam(t, wasmUrl);
}

export class Pippin {
  #engine;
  #threads;
  /** Milliseconds from `Pippin.load` to ready (set by `load`). */
  #loadMs = 0;
  /** `{ draft, draftReason }` of `info()`. */
  #draft = { draft: false };

  constructor(engine, threads = { team: null, count: 1, reason: "" }) {
    this.#engine = engine;
    this.#threads = threads;
    if (threads.team) {
      teams.set(this, threads.team);
      // A Pippin dropped without dispose() still ends its workers (and their weights).
      unowned.register(this, threads.team, this);
    }
    engines.set(this, engine);
    // `llm.chat(messages)` and OpenAI's `llm.chat.completions.create(params)`.
    this.chat = Object.assign(this.chat.bind(this), { completions: completionsFor(this) });
  }

  /**
   * Loads a GGUF model, streaming it tensor by tensor: onto the GPU (WebGPU), or into
   * memory for the CPU backend where WebGPU is missing or only a software adapter.
   * @param source a URL, a Response, a Blob/File or a Uint8Array; for a model split into
   * several files (gguf-split), an array of them in order, or the URL of the first
   * (`…-00001-of-000NN.gguf`: the others are found by name)
   * @param options { onProgress, backend: "auto"|"webgpu"|"cpu", threads, kvCache: "int8"|"int4"|"f16"|"f32", maxContext, gpuLimits, cache, wasmUrl, guidedWasmUrl, signal, draft }
   * (`draft`: a smaller model of the same vocabulary, as `source`, that proposes the
   * guesses of speculative decoding on the CPU backend; progress phase "draft")
   */
  static async load(source, options = {}) {
    const t0 = performance.now();
    const signal = options.signal;
    if (signal?.aborted) throw loadAborted(signal);
    const webgpu = await probeWebGPU(options.backend ?? "auto");
    checkThreads(options.threads);
    await initOnce(options.wasmUrl);
    if (options.guidedWasmUrl) guidedWasmUrl = options.guidedWasmUrl;
    const progress = options.onProgress;
    progress?.({ phase: "download", loaded: 0, total: 0, fraction: 0 });
    // Ends every download this load opened once it is done with them, or failed: a body
    // left open holds one of the host's connections.
    const downloads = new AbortController();
    const fetching = signal && AbortSignal.any ? AbortSignal.any([signal, downloads.signal]) : (signal ?? downloads.signal);
    const src = await openSource(source, { ...options, signal: fetching }).catch((e) => {
      downloads.abort();
      throw e;
    });
    const onBytes = progress
      ? (loaded, size) => {
          const t = size || src.total || 0;
          progress({ phase: "upload", loaded, total: t, fraction: t ? Math.min(1, loaded / t) : 0 });
        }
      : undefined;
    const engineOptions = {
      kvCache: options.kvCache,
      maxContext: options.maxContext,
      sessionMemory: options.sessionMemory,
      gpuLimits: options.gpuLimits,
      softwareAdapter: webgpu === "software",
      backend: options.backend ?? "auto",
      webgpu,
    };
    const onPhase = progress ? (phase) => progress({ phase, loaded: src.total ?? 0, total: src.total ?? 0, fraction: 1 }) : undefined;
    let engine;
    let threads = { team: null };
    try {
      threads = await threadsFor(options, webgpu).catch((e) => {
        throw asPippinError(e, "Internal");
      });
      if (signal?.aborted) throw loadAborted(signal);
      // The engine takes every file's stream and size (one of each for one file).
      const streams = [src.stream].flat().map((s) => abortable(s, signal));
      const totals = src.totals ?? [src.total];
      engine = await Engine.load(streams, totals, engineOptions, onBytes, onPhase, threads.team ?? undefined);
      if (threads.team && engine.info().backend !== "cpu") {
        threads.team.close();
        threads = { team: null, count: 1, reason: "the WebGPU backend runs the model" };
      }
      await threads.team?.ready().catch((e) => {
        throw new PippinError("DeviceLimits", `a CPU worker thread could not take its share of the model: ${e.message}`);
      });
      if (signal?.aborted) throw loadAborted(signal);
    } catch (e) {
      threads.team?.close();
      engine?.free();
      const stopped = Boolean(signal?.aborted);
      // An aborted load says nothing about a cached copy: it is kept.
      await src.done(stopped && Boolean(src.fromCache));
      downloads.abort();
      if (stopped) throw loadAborted(signal);
      // A cached copy that does not load is evicted and the model downloaded again.
      if (src.fromCache) return Pippin.load(source, options);
      throw e;
    }
    await src.done(true);
    downloads.abort();
    // The model is kept (cached) whatever becomes of its draft.
    const draft = await loadDraft(engine, options, signal).catch((e) => {
      threads.team?.close();
      engine.free();
      throw signal?.aborted ? loadAborted(signal) : e;
    });
    // A copy that could not be kept (storage full, over quota) is said, not thrown: the
    // model loaded.
    const cacheError = src.cacheError;
    progress?.({ phase: "ready", loaded: src.total ?? 0, total: src.total ?? 0, fraction: 1, ...(cacheError && { cacheError }) });
    const llm = new Pippin(engine, threads);
    llm.#draft = draft;
    llm.#loadMs = performance.now() - t0;
    return llm;
  }

  /** Streams a continuation of `prompt` (no chat template). */
  generate(prompt, options = {}) {
    const start = () => this.#engine.generate(String(prompt), generationOptions(options), options.adapter);
    return new Reply(replyCalls(() => this.#engine, start), options.signal);
  }

  /** Streams the assistant's reply to `messages` ([{role, content}]) in the model's chat template. */
  chat(messages, options = {}) {
    const start = () => this.#engine.chat(messages, generationOptions(options), options.adapter);
    return new Reply(replyCalls(() => this.#engine, start), options.signal);
  }

  /** Runs what the KV cache lacks of `messages` (no reply): `{ cachedTokens, computedTokens }`. */
  async prefill(messages, options = {}) {
    return this.#engine.prefill(messages, generationOptions(options), options.adapter);
  }

  /** Tokens of the prompt `chat(messages, options)` runs. */
  async countTokens(messages, options = {}) {
    return this.#engine.countTokens(messages, generationOptions(options));
  }

  /** `messages`' KV cache as bytes (`Session.save` adds the transcript). */
  async saveState(messages, options = {}) {
    return this.#engine.save(messages, generationOptions(options), options.adapter);
  }

  /** Holds bytes `saveState` wrote again; the tokens they hold. */
  async restoreState(bytes) {
    return this.#engine.restore(bytes);
  }

  /**
   * Loads a PEFT LoRA adapter under `name`. `source` is the URL of a folder holding
   * adapter_config.json and adapter_model.safetensors, or `{ config, weights }` where
   * each is a URL, a Response, a Blob or bytes (config may also be the parsed object).
   */
  async loadAdapter(name, source, options = {}) {
    const files = typeof source === "string" || source instanceof URL
      ? { config: inFolder(source, "adapter_config.json"), weights: inFolder(source, "adapter_model.safetensors") }
      : source;
    const config = await adapterBytes(files.config, options.onProgress, "config");
    const weights = await adapterBytes(files.weights, options.onProgress, "weights");
    this.#engine.loadAdapter(String(name), config, weights);
  }

  /** The adapter for calls that do not pass `adapter` (null: the base model). */
  useAdapter(name) {
    this.#engine.useAdapter(name ?? undefined);
  }

  /** Frees an adapter's GPU memory; false when none had that name. */
  unloadAdapter(name) {
    return this.#engine.unloadAdapter(String(name));
  }

  /** [{ name, bytes, rank, active }] */
  adapters() {
    return this.#engine.adapters();
  }

  /** { prefillTokensPerS, decodeTokensPerS, timeToFirstTokenMs, load: { totalMs,
   * weightsMs, headerCompileMs, compileMs }, weightBytes, kvCacheBytes, contextTokens, dispatchesPerToken,
   * gpuBytes: { weights, kvCache, scratch, adapters }, wasmHeapBytes, wasmHeapPeakBytes,
   * wasmMemoryBytes } */
  stats() {
    const s = this.#engine.stats();
    s.load.totalMs = this.#loadMs;
    return s;
  }

  /** { config, backend: "webgpu"|"cpu", backendReason, threads, threadsReason, gpuAdapter, gpuBackend, shaderF16, subgroups, maxStorageBufferBindingSize, maxBufferSize } */
  info() {
    const { count, reason } = this.#threads;
    return { ...this.#engine.info(), threads: count, threadsReason: reason, ...this.#draft };
  }

  /** Forgets the conversation (a new chat). */
  reset() {
    this.#engine.reset();
  }

  /** Frees the GPU memory (refused while a reply runs). */
  async dispose() {
    if (this.#engine === DISPOSED) return;
    this.#engine.dispose();
    this.#engine.free();
    this.#threads.team?.close();
    unowned.unregister(this);
    this.#engine = DISPOSED;
    engines.delete(this);
  }

  /** Models kept in Cache Storage: [{ url, bytes }]. */
  static async cached() {
    if (!globalThis.caches) return [];
    const cache = await caches.open(CACHE);
    const out = [];
    for (const req of await cache.keys()) {
      const r = await cache.match(req);
      out.push({ url: req.url, bytes: Number(r?.headers.get(SIZE_HEADER)) || (await r.blob()).size });
    }
    return out;
  }

  /** Removes a model from Cache Storage (every file of a split model, given the URL of
   * its first or an array of its files' URLs); true when any of it was there. */
  static async evict(url) {
    if (!globalThis.caches) return false;
    const cache = await caches.open(CACHE);
    const urls = Array.isArray(url) ? url : (shardUrls(url) ?? [url]);
    const gone = await Promise.all(urls.map((u) => cache.delete(String(u))));
    return gone.some(Boolean);
  }

  /** `evict(url)` under its first name. */
  static deleteCached(url) {
    return Pippin.evict(url);
  }
}

Object.assign(Pippin.prototype, sessionMethods);

export default Pippin;
