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

export { PippinError, ERROR_CODES };

const CACHE = "pippin-models";
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

const SIZE_HEADER = "x-pippin-bytes";
/** Most files of a split model loaded by URL: an HTTP/1.1 host gives a page 6
 * connections, one is left for the CPU threads' scripts and whatever else the page
 * fetches. */
const MAX_URL_FILES = 5;

/** Cache Storage, when this page has it (not on http: origins other than localhost). */
async function openCache() {
  try {
    return globalThis.caches ? await caches.open(CACHE) : null;
  } catch {
    return null;
  }
}

/** fetch(url), or a PippinError ("Download", or "Aborted" when `signal` fired). */
async function download(url, what, signal) {
  let response;
  try {
    response = await fetch(url, { signal });
  } catch (e) {
    if (signal?.aborted) throw loadAborted(signal);
    throw new PippinError("Download", `Downloading ${what} from ${url} failed: ${e.message}`, { cause: e });
  }
  if (!response.ok) {
    throw new PippinError("Download", `Downloading ${what} from ${url} failed: HTTP ${response.status} ${response.statusText}`);
  }
  if (!response.body) throw new PippinError("Download", `Downloading ${what} from ${url} failed: the response has no body.`);
  return response;
}

/** `stream`, erroring as soon as `signal` fires (the engine's read then fails), or
 * when the pipe cannot start (a body already read). */
function abortable(stream, signal) {
  if (!signal) return stream;
  const through = new TransformStream();
  stream.pipeTo(through.writable, { signal }).catch((e) => through.writable.abort(e).catch(() => {}));
  return through.readable;
}

/**
 * The URLs of every file of a split model (llama.cpp's gguf-split names) when `url`
 * names its first, `…-00001-of-000NN.gguf` (as `shard_names` in src/gguf/split.rs);
 * null otherwise. The query string, if any, is kept on each.
 */
function shardUrls(url) {
  const m = /^(.*)-00001-of-(\d{5})\.gguf((?:[?#].*)?)$/.exec(String(url));
  const n = m ? Number(m[2]) : 0;
  if (!n) return null;
  return Array.from({ length: n }, (_, k) => `${m[1]}-${String(k + 1).padStart(5, "0")}-of-${m[2]}.gguf${m[3]}`);
}

/**
 * The model's files: one source, an array of a split model's files in order, or the URL
 * of a split's first file (the others are found by name). Each file is opened as
 * `openFile` does (from Cache Storage or downloaded, each cached under its own URL);
 * `done(ok)` commits or discards them all.
 */
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

async function openSource(source, options) {
  const named = typeof source === "string" || source instanceof URL ? shardUrls(source) : null;
  if (!Array.isArray(source) && !named) return openFile(source, options);
  const list = named ?? source;
  if (list.length === 0) throw new PippinError("BadOptions", "Pippin.load was given an empty list of model files.");
  // Every file's download is open at once (the headers are read first). An HTTP/1.1
  // server gives a page 6 connections per host: a 7th request would wait for ever.
  const urls = list.filter((f) => typeof f === "string" || f instanceof URL).length;
  if (urls > MAX_URL_FILES) {
    throw new PippinError(
      "BadOptions",
      `This model is split into ${list.length} files; at most ${MAX_URL_FILES} can be downloaded at once from one server. ` +
        "Merge them (llama-gguf-split --merge) or split the model into fewer, larger files, or pass the files as Blobs.",
    );
  }
  const files = [];
  // The storage left is shared by the files: each is checked against what the ones
  // before it will take.
  const planned = { bytes: 0 };
  try {
    for (const f of list) files.push(await openFile(f, { ...options, planned }));
  } catch (e) {
    await Promise.all(files.map((f) => f.done(false).catch(() => {})));
    throw e;
  }
  const totals = files.map((f) => f.total);
  return {
    stream: files.map((f) => f.stream),
    total: totals.every((t) => t) ? totals.reduce((a, b) => a + b, 0) : undefined,
    totals,
    fromCache: files.every((f) => f.fromCache),
    get cacheError() {
      return files.find((f) => f.cacheError)?.cacheError;
    },
    done: async (ok) => {
      await Promise.all(files.map((f) => f.done(ok)));
    },
  };
}

/**
 * The model's bytes for the engine. A URL comes from Cache Storage when a complete copy
 * is there; a download is written to the cache as the engine reads it (one read of the
 * network stream, paced by the engine: nothing is buffered beyond a chunk), and the
 * entry is committed only when the model loaded: `done(ok)` commits or discards it.
 */
async function openFile(source, options) {
  if (typeof source === "string" || source instanceof URL) {
    const url = String(source);
    const cache = options.cache !== false ? await openCache() : null;
    const hit = cache ? await cache.match(url) : undefined;
    if (hit?.body && hit.headers.has(SIZE_HEADER)) {
      const total = Number(hit.headers.get(SIZE_HEADER));
      return { stream: hit.body, total, fromCache: true, done: async (ok) => ok || (await cache.delete(url)) };
    }
    if (hit) await cache.delete(url); // stored without its size: not trusted
    const response = await download(url, "the model", options.signal);
    const total = Number(response.headers.get("content-length")) || undefined;
    const body = total ? resumable(url, response, total, options.signal) : response.body;
    // Without a size the copy could not be checked whole later: it is not kept.
    if (!cache || !total) return { stream: body, total, done: async () => {} };
    const left = await storageLeft();
    const before = options.planned?.bytes ?? 0;
    if (left !== undefined && before + total > left) {
      return { stream: body, total, done: async () => {}, cacheError: storageError(url, total, Math.max(0, left - before)) };
    }
    if (options.planned) options.planned.bytes += total;
    return cachingStream(cache, url, body, total);
  }
  if (source instanceof Response) {
    if (!source.body) throw new PippinError("BadOptions", "The model Response has no body.");
    const total = Number(source.headers.get("content-length")) || undefined;
    return { stream: source.body, total, done: async () => {} };
  }
  if (source instanceof Blob) return { stream: source.stream(), total: source.size, done: async () => {} };
  if (source instanceof ArrayBuffer) source = new Uint8Array(source);
  if (ArrayBuffer.isView(source)) {
    const blob = new Blob([source]);
    return { stream: blob.stream(), total: blob.size, done: async () => {} };
  }
  throw new PippinError("BadOptions", "Pippin.load takes a URL, a Response, a Blob or File, or a Uint8Array (or an array of them: a split model's files).");
}

/**
 * A stream of `response` that also writes each chunk to Cache Storage under `url`,
 * committed by `done(true)` once all `total` bytes are through (the entry records its
 * size, so a later hit is used only whole); `done(false)` aborts and evicts it.
 */
function cachingStream(cache, url, body, total) {
  const reader = body.getReader();
  const { readable, writable } = new TransformStream();
  const writer = writable.getWriter();
  let bytes = 0;
  const headers = { "content-type": "application/octet-stream", [SIZE_HEADER]: String(total) };
  const stored = cache.put(url, new Response(readable, { headers })).then(
    () => true,
    () => false,
  );
  // A failed cache write (a full disk, storage pressure) only loses the copy: the
  // model keeps streaming to the engine.
  let caching = true;
  const failed = stored.then((ok) => ok || (caching = false));
  const pump = async () => {
    const { value, done } = await reader.read();
    if (!done) {
      bytes += value.byteLength;
      if (caching) await Promise.race([writer.write(value).catch(() => (caching = false)), failed]);
    }
    return { value, done };
  };
  const stream = new ReadableStream({
    async pull(controller) {
      const { value, done } = await pump();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel: (why) => reader.cancel(why),
  });
  const file = { stream, total };
  file.done = async (ok) => {
    if (ok) {
      // The engine may stop before the file's end: the cache gets the rest too.
      try {
        for (;;) if (!caching || (await pump()).done) break;
      } catch (e) {
        file.cacheError = new PippinError(
          "Download",
          `The model loaded, but the rest of ${url} could not be downloaded to keep it in Cache Storage: ${e?.message ?? e}`,
        );
        caching = false;
      }
      if (caching && bytes === total) {
        const closed = await writer.close().then(() => true, () => false);
        if (closed && (await stored)) return;
      }
      // The model loaded, its copy did not: storage said no (quota, a full disk).
      file.cacheError ??= storageError(url, total, await storageLeft());
    }
    // The copy is lost, never the load: nothing here may throw.
    await writer.abort(new Error("the model did not load")).catch(() => {});
    await reader.cancel().catch(() => {});
    await stored;
    await cache.delete(url).catch(() => {});
  };
  return file;
}

/** Bytes of storage this origin has left (navigator.storage.estimate()), if it says. */
async function storageLeft() {
  try {
    const e = await globalThis.navigator?.storage?.estimate?.();
    return e && Number.isFinite(e.quota) ? Math.max(0, e.quota - (e.usage ?? 0)) : undefined;
  } catch {
    return undefined;
  }
}

/** Why a model that loaded is not kept in Cache Storage. */
function storageError(url, total, left) {
  const mb = (n) => `${Math.ceil(n / 1e6)} MB`;
  const room = left === undefined ? "this browser did not say how much storage is left" : `${mb(left)} of storage are left to this site`;
  return new PippinError(
    "Storage",
    `The model loaded, but ${url} (${mb(total)}) could not be kept in Cache Storage: ${room} ` +
      "(navigator.storage.estimate()). It will be downloaded again next time; free space with Pippin.evict(url).",
  );
}

/**
 * `response`'s body, resumed where it broke off: a download that fails midway (a
 * dropped connection) is asked for again from the byte it reached, with `Range` and
 * `If-Range` on the file's ETag or Last-Modified, up to 3 tries (0.5, 2, 5 s apart)
 * without progress. Only the same file is ever spliced: a 206 must cover the rest of
 * a file of the same size, a 200 (a server that ignores Range, or the file changed)
 * must carry the same validator, and then the bytes already read are skipped. A file
 * without a validator (or whose headers a cross-origin server does not expose) is not
 * resumed: the break is a Download error, as before.
 */
function resumable(url, response, total, signal) {
  let reader = response.body.getReader();
  let got = 0;
  let breaks = 0; // in a row, without a byte between them
  const validator = response.headers.get("etag") ?? response.headers.get("last-modified");
  const same = (r) => (r.headers.get("etag") ?? r.headers.get("last-modified")) === validator;
  const reopen = async (cause) => {
    for (const wait of [500, 2000, 5000]) {
      await new Promise((resolve) => setTimeout(resolve, wait));
      if (signal?.aborted) break;
      const headers = { range: `bytes=${got}-`, "if-range": validator };
      // no-store: the browser's HTTP cache must not answer (or resume) it itself.
      const r = await fetch(url, { headers, signal, cache: "no-store" }).catch(() => null);
      if (!r) continue;
      const range = r.headers.get("content-range");
      if (r.status === 206 && r.body && range === `bytes ${got}-${total - 1}/${total}`) return r.body.getReader();
      if (r.status === 200 && r.body && same(r) && Number(r.headers.get("content-length")) === total) return skipping(r.body.getReader(), got);
      await r.body?.cancel().catch(() => {});
      break; // an answer that cannot continue this file: trying again will not help
    }
    throw cause;
  };
  return new ReadableStream({
    async pull(controller) {
      try {
        const { value, done } = await reader.read();
        if (done && got < total) throw new Error(`the download ended at byte ${got} of ${total}`);
        if (done) return controller.close();
        got += value.byteLength;
        breaks = 0;
        controller.enqueue(value);
      } catch (e) {
        // Every byte is in (the connection closed uncleanly after them): done.
        if (got >= total) return controller.close();
        if (signal?.aborted || !validator || ++breaks > 3) throw e;
        reader = await reopen(e);
        return this.pull(controller);
      }
    },
    cancel: (why) => reader.cancel(why),
  });
}

/** `reader`, its first `n` bytes dropped. */
function skipping(reader, n) {
  return {
    async read() {
      for (;;) {
        const r = await reader.read();
        if (r.done || n === 0) return r;
        if (r.value.byteLength <= n) {
          n -= r.value.byteLength;
          continue;
        }
        const value = r.value.subarray(n);
        n = 0;
        return { value, done: false };
      }
    },
    cancel: (why) => reader.cancel(why),
  };
}

function inFolder(folder, file) {
  const base = new URL(String(folder).replace(/\/?$/, "/"), globalThis.location?.href);
  return new URL(file, base);
}

async function adapterBytes(src, onProgress, what) {
  if (src && typeof src === "object" && !(src instanceof URL) && !(src instanceof Blob) && !(src instanceof Response) && !ArrayBuffer.isView(src) && !(src instanceof ArrayBuffer)) {
    return new TextEncoder().encode(JSON.stringify(src));
  }
  if (typeof src === "string" || src instanceof URL) {
    src = await download(src, `the adapter's ${what}`);
  }
  let bytes;
  try {
    bytes = new Uint8Array(src instanceof Response || src instanceof Blob ? await src.arrayBuffer() : ArrayBuffer.isView(src) ? src.buffer.slice(src.byteOffset, src.byteOffset + src.byteLength) : src);
  } catch (e) {
    throw asPippinError(e, "Download");
  }
  onProgress?.({ phase: what, loaded: bytes.length, total: bytes.length, fraction: 1 });
  return bytes;
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
