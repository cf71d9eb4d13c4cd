// `pippin/worker`: the same API with the engine in a Web Worker, so the page never
// freezes while a model loads or generates. Calls become messages; a reply's chunks
// stream back as the worker makes them.
import { Reply } from "./reply.js";
import { sessionMethods } from "./session.js";
import { completionsFor } from "./openai.js";
import { PippinError, ERROR_CODES, fromWire, loadAborted } from "./errors.js";
import { generationOptions } from "./options.js";

export { PippinError, ERROR_CODES };

let nextId = 1;

class Connection {
  constructor(worker) {
    this.worker = worker;
    this.pending = new Map();
    /** Replies' chunks as the worker posts them, by reply id. */
    this.replies = new Map();
    worker.onmessage = (e) => {
      const { id, ok, value, error, progress, reply, chunk } = e.data;
      if (reply !== undefined) return this.#deliver(reply, error ? { error } : { chunk });
      const p = this.pending.get(id);
      if (!p) return;
      if (progress?.cacheError) progress.cacheError = fromWire(progress.cacheError);
      if (progress) return p.onProgress?.(progress);
      this.pending.delete(id);
      if (ok) p.resolve(value);
      else p.reject(fromWire(error));
    };
    worker.onerror = (e) => {
      // A worker that cannot start (its script missing from a build) says so here.
      this.fail(new PippinError("Internal", `Pippin's worker failed: ${e.message ?? "its script did not load"}`));
    };
  }

  /** The worker is gone: every pending and later call and reply fails with `err`. */
  fail(err) {
    this.closed ??= err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const id of this.replies.keys()) this.#deliver(id, { error: { message: err.message, code: err.code } });
  }

  call(method, args = [], onProgress) {
    if (this.closed) return Promise.reject(this.closed);
    const id = nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onProgress });
      this.worker.postMessage({ id, method, args });
    });
  }

  #queue(id) {
    let q = this.replies.get(id);
    if (!q) this.replies.set(id, (q = { items: [], waiting: null }));
    return q;
  }

  #deliver(id, item) {
    const q = this.#queue(id);
    if (q.waiting) {
      const w = q.waiting;
      q.waiting = null;
      w(item);
    } else q.items.push(item);
  }

  /** The next chunk the worker posted for reply `id`. */
  async next(id) {
    const q = this.#queue(id);
    if (this.closed && !q.items.length) throw this.closed;
    const item = q.items.length ? q.items.shift() : await new Promise((ok) => (q.waiting = ok));
    if (item.error) throw fromWire(item.error);
    if (item.chunk.done) this.replies.delete(id);
    return item.chunk;
  }

  /** The low-level calls of a reply (see reply.js) through the worker. */
  replyCalls(kind, payload, options) {
    return {
      start: () => this.call("start", [kind, payload, options]),
      next: (id) => this.next(id),
      abort: (id) => this.call("abort", [id]),
      release: (id) => {
        this.replies.delete(id);
        return this.call("release", [id]);
      },
    };
  }
}

/** A reply's options as the worker takes them: pippin's, and the adapter (the worker
 * splits it off); nothing else crosses (a signal stays on the page). */
function workerOptions(o) {
  return { ...generationOptions(o), ...(o.adapter !== undefined && { adapter: o.adapter }) };
}

export class Pippin {
  #conn;

  constructor(conn) {
    this.#conn = conn;
    // `llm.chat(messages)` and OpenAI's `llm.chat.completions.create(params)`.
    this.chat = Object.assign(this.chat.bind(this), { completions: completionsFor(this) });
  }

  /** As `Pippin.load` of the main module; Blob, bytes and URL sources are sent to the worker. */
  static async load(source, options = {}) {
    // Written inline as bundlers (Vite, webpack, esbuild, Parcel) recognize it: they
    // then emit worker-host.js with the build. A URL kept in a variable is missed.
    const worker = new Worker(new URL("./worker-host.js", import.meta.url), { type: "module" });
    const conn = new Connection(worker);
    const { onProgress, signal, ...opts } = options;
    // Aborting ends the worker, and with it the download and the GPU memory it held.
    const onAbort = () => {
      worker.terminate();
      conn.fail(loadAborted(signal));
    };
    try {
      if (signal?.aborted) throw loadAborted(signal);
      signal?.addEventListener("abort", onAbort);
      // The worker resolves URLs against worker-host.js, not the page: send them whole
      // (resolved as the page's own fetches are, <base href> included).
      const base = globalThis.document?.baseURI ?? location.href;
      const sendable = async (s) => {
        if (s instanceof Response) return s.blob();
        return typeof s === "string" || s instanceof URL ? new URL(s, base).href : s;
      };
      source = Array.isArray(source) ? await Promise.all(source.map(sendable)) : await sendable(source);
      for (const k of ["wasmUrl", "guidedWasmUrl"]) {
        if (opts[k]) opts[k] = new URL(opts[k], base).href;
      }
      await conn.call("load", [source, opts], onProgress);
    } catch (e) {
      worker.terminate();
      throw e;
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
    return new Pippin(conn);
  }

  static cached() {
    return import("./index.js").then((m) => m.Pippin.cached());
  }

  static evict(url) {
    return import("./index.js").then((m) => m.Pippin.evict(url));
  }

  static deleteCached(url) {
    return import("./index.js").then((m) => m.Pippin.deleteCached(url));
  }

  generate(prompt, options = {}) {
    const { signal, ...o } = options;
    return new Reply(this.#conn.replyCalls("generate", String(prompt), workerOptions(o)), signal);
  }

  chat(messages, options = {}) {
    const { signal, ...o } = options;
    return new Reply(this.#conn.replyCalls("chat", messages, workerOptions(o)), signal);
  }

  prefill(messages, options = {}) {
    return this.#conn.call("prefill", [messages, workerOptions(options)]);
  }

  countTokens(messages, options = {}) {
    return this.#conn.call("countTokens", [messages, workerOptions(options)]);
  }

  saveState(messages, options = {}) {
    return this.#conn.call("saveState", [messages, workerOptions(options)]);
  }

  restoreState(bytes) {
    return this.#conn.call("restoreState", [bytes]);
  }

  loadAdapter(name, source, options = {}) {
    if (source instanceof URL) source = String(source);
    return this.#conn.call("loadAdapter", [name, source], options.onProgress);
  }

  useAdapter(name) {
    return this.#conn.call("useAdapter", [name ?? null]);
  }

  unloadAdapter(name) {
    return this.#conn.call("unloadAdapter", [name]);
  }

  adapters() {
    return this.#conn.call("adapters");
  }

  stats() {
    return this.#conn.call("stats");
  }

  info() {
    return this.#conn.call("info");
  }

  reset() {
    return this.#conn.call("reset");
  }

  async dispose() {
    if (this.#conn.closed?.code === "Disposed") return;
    await this.#conn.call("dispose");
    this.#conn.worker.terminate();
    this.#conn.fail(new PippinError("Disposed", "this model was disposed"));
  }
}

Object.assign(Pippin.prototype, sessionMethods);

export default Pippin;
