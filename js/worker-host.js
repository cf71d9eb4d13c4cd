// Runs inside the Web Worker started by worker.js: one Pippin engine, driven by
// messages. A reply runs ahead of the page: once started, its chunks are computed and
// posted as fast as the engine makes them, not one per request.
import { Pippin, engineOf } from "./index.js";
import { PippinError, toWire } from "./errors.js";
import { breathe } from "./reply.js";

let llm = null;
let engine = null;
/** The reply being pumped: its id, and whether the page let go of it. */
let pumping = null;

function pump(id) {
  const me = { id, released: false };
  me.done = run(me);
  pumping = me;
}

async function run(me) {
  const id = me.id;
  try {
    for (;;) {
      // Messages (abort, release, calls to refuse) are handled between steps.
      await breathe();
      if (me.released) {
        engine.release(id);
        return;
      }
      const chunk = await engine.next(id);
      if (me.released) {
        // The page let go while this step ran: end the reply now the engine is free.
        engine.release(id);
        return;
      }
      postMessage({ reply: id, chunk });
      if (chunk.done) return;
    }
  } catch (err) {
    if (!me.released) postMessage({ reply: id, error: toWire(err) });
  } finally {
    if (pumping === me) pumping = null;
  }
}

const methods = {
  async load(id, source, options) {
    // A PippinError (cacheError) crosses as its wire form, rebuilt on the page.
    const onProgress = (p) => postMessage({ id, progress: p.cacheError ? { ...p, cacheError: toWire(p.cacheError) } : p });
    llm = await Pippin.load(source, { ...options, onProgress });
    engine = engineOf(llm);
  },
  async start(id, kind, payload, options) {
    const { adapter, ...opts } = options;
    const replyId = kind === "chat" ? await engine.chat(payload, opts, adapter) : await engine.generate(String(payload), opts, adapter);
    pump(replyId);
    return replyId;
  },
  abort(id, replyId) {
    engine.abort(replyId);
  },
  // Resolves once the reply has ended and the engine is free for the next call.
  async release(id, replyId) {
    if (pumping?.id === replyId) {
      pumping.released = true;
      await pumping.done;
    }
    engine.release(replyId);
  },
  loadAdapter: (id, name, source) => llm.loadAdapter(name, source, { onProgress: (p) => postMessage({ id, progress: p }) }),
  // Later calls find no model: Disposed (see onmessage).
  dispose: async () => {
    await llm.dispose(); // refused (Busy) while a reply runs: the model stays
    llm = engine = null;
  },
};

/** Every other call is the model's method of that name, its arguments as they came. */
function forward(method, args) {
  if (method === "constructor" || typeof Pippin.prototype[method] !== "function") {
    throw new PippinError("Internal", `pippin/worker has no method ${method}`);
  }
  return llm[method](...args);
}

onmessage = async (e) => {
  const { id, method, args } = e.data;
  try {
    if (method !== "load" && !llm) throw new PippinError("Disposed", "no model is loaded in this worker");
    const value = await (Object.hasOwn(methods, method) ? methods[method](id, ...args) : forward(method, args));
    postMessage({ id, ok: true, value: value === undefined ? null : value });
  } catch (err) {
    postMessage({ id, ok: false, error: toWire(err) });
  }
};
