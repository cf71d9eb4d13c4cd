// Runs inside the Web Worker started by worker.js: one Pippin engine, driven by messages.
import { Pippin } from "./index.js";

let llm = null;
let reply = null;
let ctl = null;

const methods = {
  async load(id, source, options) {
    llm = await Pippin.load(source, { ...options, onProgress: (p) => postMessage({ id, progress: p }) });
  },
  // Each reply gets an AbortController: abort() ends it through the same path as a
  // page's AbortSignal, and the next next() returns its final chunk.
  generate(id, prompt, options) {
    ctl = new AbortController();
    reply = llm.generate(prompt, { ...options, signal: ctl.signal })[Symbol.asyncIterator]();
  },
  chat(id, messages, options) {
    ctl = new AbortController();
    reply = llm.chat(messages, { ...options, signal: ctl.signal })[Symbol.asyncIterator]();
  },
  async next() {
    if (!reply) throw new Error("no generation is running: call generate() or chat() first");
    const { value, done } = await reply.next();
    if (done || value.done) reply = null;
    return done ? { text: "", done: true, finishReason: "abort" } : value;
  },
  abort() {
    ctl?.abort();
  },
  loadAdapter: (id, name, source) => llm.loadAdapter(name, source, { onProgress: (p) => postMessage({ id, progress: p }) }),
  useAdapter: (id, name) => llm.useAdapter(name),
  unloadAdapter: (id, name) => llm.unloadAdapter(name),
  adapters: () => llm.adapters(),
  stats: () => llm.stats(),
  info: () => llm.info(),
  reset: () => llm.reset(),
  dispose: () => llm.dispose(),
};

onmessage = async (e) => {
  const { id, method, args } = e.data;
  try {
    if (method !== "load" && !llm) throw new Error("no model is loaded in this worker");
    const value = await methods[method](id, ...args);
    postMessage({ id, ok: true, value: value === undefined ? null : value });
  } catch (err) {
    postMessage({ id, ok: false, error: err instanceof Error ? err.message : String(err) });
  }
};
