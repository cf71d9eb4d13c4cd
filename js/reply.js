// One reply, read once: `for await` over it, `reply.stream()` or `await reply.text()`.
// Shared by "pippin" and "pippin/worker"; `calls` is how each reaches its engine:
//   start() → id, next(id) → chunk, abort(id), release(id)
// A reply owns the engine from start() until it ends (done, stopped, aborted, or let
// go of: `break`, `return()`, a cancelled stream): then it is released. Its id goes
// with every call, so a stale reply can never stop or read a newer one.
import { PippinError } from "./errors.js";

/** Lets the event loop run (input, rendering, messages such as an abort) between two
 * steps. A CPU-backend step is synchronous wasm that resolves its promise at once, and a
 * loop that only awaits resolved promises holds the thread for the whole reply. A
 * message-channel round trip: not setTimeout (clamped to 4 ms when nested), nor
 * scheduler.yield() (its continuation runs ahead of the waiting messages). */
export function breathe() {
  return new Promise((resolve) => {
    const { port1, port2 } = new MessageChannel();
    port1.onmessage = () => {
      port1.close();
      resolve();
    };
    port2.postMessage(0);
  });
}

export class Reply {
  #calls;
  #signal;
  #used = false;

  constructor(calls, signal) {
    this.#calls = calls;
    this.#signal = signal;
  }

  async *[Symbol.asyncIterator]() {
    if (this.#used) throw new PippinError("BadOptions", "A reply can be read only once.");
    this.#used = true;
    const calls = this.#calls;
    const signal = this.#signal;
    const id = await calls.start();
    const onAbort = () => calls.abort(id);
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort);
    let finished = false;
    try {
      for (;;) {
        await breathe();
        const c = await calls.next(id);
        if (c.done) {
          finished = true;
          const end = { text: "", done: true, finishReason: c.finishReason, usage: c.usage };
          if (c.toolCalls?.length) end.toolCalls = c.toolCalls;
          yield end;
          return;
        }
        const piece = { text: c.text, tokenId: c.tokenId, done: false };
        if (c.logprobs) piece.logprobs = c.logprobs;
        yield piece;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      if (!finished) await calls.release(id);
    }
  }

  /** The same chunks as a ReadableStream. */
  stream() {
    const it = this[Symbol.asyncIterator]();
    return new ReadableStream({
      async pull(controller) {
        const { value, done } = await it.next();
        if (done) controller.close();
        else controller.enqueue(value);
      },
      cancel() {
        return it.return();
      },
    });
  }

  /** The whole reply as one string. */
  async text() {
    let s = "";
    for await (const c of this) s += c.text;
    return s;
  }
}
