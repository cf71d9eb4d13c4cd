// Sessions: several conversations on one loaded model, as Chrome's Prompt API and
// Apple's Foundation Models offer them. Shared by "pippin" and "pippin/worker": a
// session is a transcript and its options; `llm` runs it through five calls that each
// entry implements (chat, prefill, countTokens, saveState, restoreState).
//
// The engine finds a conversation's keys and values by its tokens (its prefix cache):
// a session switched back to, a clone, or a new session with the same system prompt
// runs only what the KV cache and its kept snapshots do not hold. So a session owns no
// memory of its own: destroy() only ends it.
import { PippinError } from "./errors.js";
import { GENERATE_OPTIONS, pick } from "./options.js";

/** Options of a session that are options of each reply. */
const REPLY_OPTIONS = [...GENERATE_OPTIONS, "adapter"];
const OVERFLOW = ["error", "drop-oldest"];
const MAGIC = "PIPSESS1";

/** A prompt's input as messages: a string (the user's), a message, or messages. */
function messagesOf(input) {
  if (typeof input === "string") return [{ role: "user", content: input }];
  if (Array.isArray(input)) return input.map(messageOf);
  return [messageOf(input)];
}

function messageOf(m) {
  if (typeof m === "string") return { role: "user", content: m };
  if (!m || typeof m.role !== "string") throw new PippinError("BadOptions", "a message is a string or { role, content }");
  return { ...m };
}

function checkOverflow(o) {
  if (o !== undefined && !OVERFLOW.includes(o)) {
    throw new PippinError("BadOptions", `overflow must be ${OVERFLOW.map((v) => JSON.stringify(v)).join(" or ")}, not ${JSON.stringify(o)}`);
  }
}

export class Session extends EventTarget {
  #llm;
  #messages;
  #options;
  #window;
  #usage = 0;
  #destroyed = false;
  /** Called with the `contextoverflow` event, as Chrome's `oncontextoverflow`. */
  oncontextoverflow = null;

  constructor(llm, messages, options, window) {
    super();
    this.#llm = llm;
    this.#messages = messages;
    this.#options = options;
    this.#window = window;
  }

  /** Most tokens the conversation may hold. */
  get contextWindow() {
    return this.#window;
  }

  /** Tokens the conversation holds now (its prompt, as the next reply would run it). */
  get contextUsage() {
    return this.#usage;
  }

  /** The conversation so far: [{ role, content }] (a copy). */
  get messages() {
    return this.#messages.map((m) => ({ ...m }));
  }

  #live() {
    if (this.#destroyed) throw new PippinError("Disposed", "this session was destroyed");
  }

  #opts(o = {}) {
    return { ...this.#options, ...pick(o, REPLY_OPTIONS), ...(o.signal && { signal: o.signal }) };
  }

  async #count(messages, opts) {
    return this.#llm.countTokens(messages, quiet(opts));
  }

  async #measure() {
    this.#usage = await this.#count(this.#messages, this.#options);
  }

  /** The messages a reply to `input` runs with: older turns dropped where the session
   * says so and the context needs it (a `contextoverflow` event says how many). */
  async #fit(input, opts) {
    let messages = [...this.#messages, ...input];
    let n = await this.#count(messages, opts);
    if (n < this.#window) return messages;
    if ((this.#options.overflow ?? "error") === "error") {
      throw new PippinError("ContextFull", `the session's next prompt has ${n} tokens but its context holds ${this.#window}`);
    }
    const first = this.#messages[0]?.role === "system" ? 1 : 0;
    let dropped = 0;
    // Whole turns go: the kept history starts with a user's message.
    const more = () => n >= this.#window || (dropped > 0 && messages[first].role !== "user");
    while (messages.length - first > input.length && more()) {
      messages.splice(first, 1);
      dropped += 1;
      n = await this.#count(messages, opts);
    }
    if (n >= this.#window) {
      throw new PippinError("ContextFull", `the prompt alone has ${n} tokens but the session's context holds ${this.#window}`);
    }
    this.#messages.splice(first, dropped);
    const e = new Event("contextoverflow");
    e.droppedMessages = dropped;
    this.oncontextoverflow?.(e);
    this.dispatchEvent(e);
    return messages;
  }

  /**
   * Streams the reply to `input` (a string, a message or messages), then adds both to
   * the conversation (an aborted or abandoned reply adds nothing). Chunks as
   * `llm.chat`'s: `{ text, tokenId, done }`, then `{ done: true, finishReason, usage }`.
   */
  promptStreaming(input, options = {}) {
    const self = this;
    let used = false;
    // Every error (a destroyed session, a bad input) comes from reading the reply.
    const chunks = async function* () {
      if (used) throw new PippinError("BadOptions", "A reply can be read only once.");
      used = true;
      self.#live();
      const opts = self.#opts(options);
      const msgs = messagesOf(input);
      const messages = await self.#fit(msgs, opts);
      let text = "";
      for await (const c of self.#llm.chat(messages, opts)) {
        if (!c.done) text += c.text;
        else if (c.finishReason !== "abort") {
          const reply = { role: "assistant", content: text };
          if (c.toolCalls?.length) reply.tool_calls = c.toolCalls;
          self.#messages.push(...msgs, reply);
          await self.#measure();
        }
        yield c;
      }
    };
    return {
      [Symbol.asyncIterator]: chunks,
      stream() {
        const it = chunks();
        return new ReadableStream({
          async pull(controller) {
            const { value, done } = await it.next();
            if (done) controller.close();
            else controller.enqueue(value);
          },
          cancel: () => it.return(),
        });
      },
      async text() {
        let s = "";
        for await (const c of chunks()) s += c.text;
        return s;
      },
    };
  }

  /** The whole reply to `input`, added to the conversation with it. */
  async prompt(input, options = {}) {
    return this.promptStreaming(input, options).text();
  }

  /** Adds messages to the conversation and runs them now (the reply comes with a later
   * prompt); resolves to `{ cachedTokens, computedTokens }`. */
  async append(input, options = {}) {
    this.#live();
    const msgs = messagesOf(input);
    const opts = this.#opts(options);
    const messages = await this.#fit(msgs, opts);
    const done = await this.#llm.prefill(messages, quiet(opts));
    this.#messages.push(...msgs);
    await this.#measure();
    return done;
  }

  /** Tokens the conversation would hold with `input` added (the prompt of a reply to it). */
  async measureContextUsage(input, options = {}) {
    this.#live();
    return this.#count([...this.#messages, ...messagesOf(input)], this.#opts(options));
  }

  /** A new session with this one's conversation and options; the two go on apart. The
   * keys and values of what they share are computed once. */
  async clone(options = {}) {
    this.#live();
    const s = new Session(this.#llm, this.messages, { ...this.#options, ...pick(options, REPLY_OPTIONS) }, this.#window);
    s.#usage = this.#usage;
    return s;
  }

  /** The conversation and its KV cache as bytes, for `llm.restoreSession(bytes)` in a
   * later page (the same model, adapter and KV format). */
  async save() {
    this.#live();
    const state = await this.#llm.saveState(this.#messages, this.#options);
    const head = new TextEncoder().encode(JSON.stringify({ messages: this.#messages, options: serializable(this.#options) }));
    const out = new Uint8Array(MAGIC.length + 4 + head.length + state.length);
    out.set(new TextEncoder().encode(MAGIC));
    new DataView(out.buffer).setUint32(MAGIC.length, head.length, true);
    out.set(head, MAGIC.length + 4);
    out.set(state, MAGIC.length + 4 + head.length);
    return out;
  }

  /** Ends the session: later calls throw `Disposed`. */
  destroy() {
    this.#destroyed = true;
  }

  /** Builds a session (`llm.createSession`). */
  static async create(llm, options = {}) {
    checkOverflow(options.overflow);
    const messages = [];
    if (options.system !== undefined) messages.push({ role: "system", content: String(options.system) });
    for (const m of options.messages ?? []) messages.push(messageOf(m));
    const own = { ...pick(options, REPLY_OPTIONS), ...(options.overflow && { overflow: options.overflow }) };
    const info = await llm.info();
    const s = new Session(llm, messages, own, info.contextWindow);
    // The conversation so far runs now: its keys and values are ready for the first
    // prompt, and for every session that starts the same way.
    if (messages.length) await llm.prefill(messages, own);
    await s.#measure();
    return s;
  }

  /** A session `save()` wrote, its KV cache held again (`llm.restoreSession`). */
  static async restore(llm, bytes) {
    const b = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const magic = new TextDecoder().decode(b.subarray(0, MAGIC.length));
    if (b.length < MAGIC.length + 4 || magic !== MAGIC) throw new PippinError("BadOptions", "these bytes are not a session saved by Pippin");
    const n = new DataView(b.buffer, b.byteOffset, b.byteLength).getUint32(MAGIC.length, true);
    let head;
    try {
      head = JSON.parse(new TextDecoder().decode(b.subarray(MAGIC.length + 4, MAGIC.length + 4 + n)));
    } catch {
      throw new PippinError("BadOptions", "this saved session is damaged (its transcript does not read)");
    }
    await llm.restoreState(b.subarray(MAGIC.length + 4 + n));
    const info = await llm.info();
    const s = new Session(llm, head.messages ?? [], head.options ?? {}, info.contextWindow);
    await s.#measure();
    return s;
  }
}

/** Options without the signal (a prefill is not aborted; a signal does not cross to a worker). */
function quiet(o) {
  const { signal, ...rest } = o;
  return rest;
}

/** Options as JSON keeps them (a RegExp response format, functions and signals are not). */
function serializable(o) {
  return JSON.parse(JSON.stringify(o));
}

/** `llm.prewarm(prefix)`: the keys and values of a conversation's start (`{ system,
 * messages, tools }`), computed now for every session that starts with it. */
export function prewarm(llm, prefix = {}) {
  const messages = [];
  if (prefix.system !== undefined) messages.push({ role: "system", content: String(prefix.system) });
  for (const m of prefix.messages ?? []) messages.push(messageOf(m));
  if (!messages.length) throw new PippinError("BadOptions", "prewarm needs a system prompt or messages");
  return llm.prefill(messages, pick(prefix, ["tools", "adapter"]));
}

/** A model's session methods, the same on both entries (`pippin`, `pippin/worker`). */
export const sessionMethods = {
  /** A conversation of its own on this model (see `Session`): `{ system, messages,
   * tools, responseFormat, temperature, topK, …, adapter, overflow: "error"|"drop-oldest" }`. */
  createSession(options = {}) {
    return Session.create(this, options);
  },
  /** A session `session.save()` wrote, in this or a later page. */
  restoreSession(bytes) {
    return Session.restore(this, bytes);
  },
  /** Computes the keys and values of a conversation's start (`{ system, messages, tools }`)
   * now, for every session that starts with it. */
  prewarm(prefix) {
    return prewarm(this, prefix);
  },
};
