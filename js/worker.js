// `pippin/worker`: the same API with the engine in a Web Worker, so the page never
// freezes while a model loads or generates. Calls become messages; replies stream back.
const HOST = new URL("./worker-host.js", import.meta.url);

let nextId = 1;

class Connection {
  constructor(worker) {
    this.worker = worker;
    this.pending = new Map();
    worker.onmessage = (e) => {
      const { id, ok, value, error, progress } = e.data;
      const p = this.pending.get(id);
      if (!p) return;
      if (progress) return p.onProgress?.(progress);
      this.pending.delete(id);
      if (ok) p.resolve(value);
      else p.reject(new Error(error));
    };
    worker.onerror = (e) => {
      for (const p of this.pending.values()) p.reject(new Error(`Pippin's worker failed: ${e.message}`));
      this.pending.clear();
    };
  }

  call(method, args = [], onProgress) {
    const id = nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onProgress });
      this.worker.postMessage({ id, method, args });
    });
  }
}

class Reply {
  constructor(conn, start, signal) {
    this.conn = conn;
    this.start = start;
    this.signal = signal;
  }

  async *[Symbol.asyncIterator]() {
    await this.start();
    const onAbort = () => this.conn.call("abort");
    if (this.signal?.aborted) onAbort();
    this.signal?.addEventListener("abort", onAbort);
    let finished = false;
    try {
      for (;;) {
        const c = await this.conn.call("next");
        if (c.done) {
          finished = true;
          yield c;
          return;
        }
        yield c;
      }
    } finally {
      this.signal?.removeEventListener("abort", onAbort);
      if (!finished) this.conn.call("abort");
    }
  }

  stream() {
    const it = this[Symbol.asyncIterator]();
    return new ReadableStream({
      async pull(c) {
        const { value, done } = await it.next();
        if (done) c.close();
        else c.enqueue(value);
      },
      cancel: () => it.return(),
    });
  }

  async text() {
    let s = "";
    for await (const c of this) s += c.text;
    return s;
  }
}

export class Pippin {
  #conn;

  constructor(conn) {
    this.#conn = conn;
  }

  /** As `Pippin.load` of the main module; Blob, bytes and URL sources are sent to the worker. */
  static async load(source, options = {}) {
    const worker = new Worker(HOST, { type: "module" });
    const conn = new Connection(worker);
    const { onProgress, signal: _s, ...opts } = options;
    if (source instanceof Response) source = await source.blob();
    if (source instanceof URL) source = String(source);
    try {
      await conn.call("load", [source, opts], onProgress);
    } catch (e) {
      worker.terminate();
      throw e;
    }
    return new Pippin(conn);
  }

  static cached() {
    return import("./index.js").then((m) => m.Pippin.cached());
  }

  static deleteCached(url) {
    return import("./index.js").then((m) => m.Pippin.deleteCached(url));
  }

  generate(prompt, options = {}) {
    const { signal, ...o } = options;
    return new Reply(this.#conn, () => this.#conn.call("generate", [prompt, o]), signal);
  }

  chat(messages, options = {}) {
    const { signal, ...o } = options;
    return new Reply(this.#conn, () => this.#conn.call("chat", [messages, o]), signal);
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
    await this.#conn.call("dispose");
    this.#conn.worker.terminate();
  }
}

export default Pippin;
