// `pippin/prompt-api`: Chrome's built-in Prompt API (`LanguageModel`) for every browser,
// backed by a Pippin model the app names once. Code written against Chrome's documented
// API runs unchanged: `installPolyfill({ model: url })` defines `globalThis.LanguageModel`
// where the browser has none, and the model loads on the first `create()`.
//
// A thin layer over Pippin's sessions (session.js): the shapes and errors of the
// Prompt API (DOMExceptions named as the spec names them) are translated here, nothing
// is decided here that sessions do not already do.
import { PippinError } from "./errors.js";

const TEXT_ONLY = ["text"];
/** What `params()` answers: Chrome's defaults (topK 1 is greedy). */
const PARAMS = { defaultTopK: 3, maxTopK: 64, defaultTemperature: 1, maxTemperature: 2 };

/** The spec's error `name`: a DOMException, or JavaScript's own TypeError/RangeError. */
function domError(name, message) {
  if (name === "TypeError") return new TypeError(message);
  if (name === "RangeError") return new RangeError(message);
  return new DOMException(message, name);
}

const aborted = (signal) => signal.reason ?? domError("AbortError", "the operation was aborted");

/** One signal for a call: the session's (destroy) and the caller's. */
function either(a, b) {
  if (!b) return a;
  if (AbortSignal.any) return AbortSignal.any([a, b]);
  const c = new AbortController();
  for (const s of [a, b]) {
    if (s.aborted) c.abort(s.reason);
    else s.addEventListener("abort", () => c.abort(s.reason), { once: true });
  }
  return c.signal;
}

/**
 * Calls on one model run one after another, as Chrome's do (the engine answers one at a
 * time): `turn()` resolves to a release function once the calls before have released
 * theirs; one given up (its signal aborted while it waited) releases as its turn comes.
 */
function queue() {
  let tail = Promise.resolve();
  return (signal) => {
    let release;
    const mine = new Promise((r) => (release = r));
    const ready = tail.then(() => release);
    tail = tail.then(() => mine);
    if (!signal) return ready;
    return new Promise((resolve, reject) => {
      const give = () => {
        reject(aborted(signal));
        ready.then((r) => r());
      };
      if (signal.aborted) return give();
      signal.addEventListener("abort", give, { once: true });
      ready.then((r) => {
        signal.removeEventListener("abort", give);
        if (signal.aborted) r();
        else resolve(r);
      });
    });
  };
}

/** Pippin's errors as the Prompt API throws them. */
function asDom(e, signal) {
  if (signal?.aborted) return aborted(signal);
  if (!(e instanceof PippinError)) return e;
  const name = {
    ContextFull: "QuotaExceededError",
    Aborted: "AbortError",
    Disposed: "InvalidStateError",
    Busy: "InvalidStateError",
    BadOptions: "NotSupportedError",
    Download: "NetworkError",
  }[e.code];
  return name ? domError(name, e.message) : e;
}

/** `expectedInputs` / `expectedOutputs` of a type other than text: not supported. */
function unsupported(o = {}) {
  const types = [...(o.expectedInputs ?? []), ...(o.expectedOutputs ?? [])].map((x) => x?.type);
  return types.find((t) => !TEXT_ONLY.includes(t));
}

/** A message's content as text (a string, or `[{ type: "text", value }]`). */
function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((p) => {
        if (p?.type !== "text") throw domError("NotSupportedError", `input of type ${JSON.stringify(p?.type)} is not supported: text only`);
        return String(p.value);
      })
      .join("");
  }
  throw domError("TypeError", "a message's content is a string or [{ type: \"text\", value }]");
}

/** A prompt's input as Pippin messages. */
function messagesOf(input) {
  if (typeof input === "string") return [{ role: "user", content: input }];
  if (!Array.isArray(input) || input.length === 0) throw domError("TypeError", "the input is a string or a non-empty array of messages");
  return input.map((m) => ({ role: m.role ?? "user", content: textOf(m.content) }));
}

/** `responseConstraint`: a JSON Schema object or a RegExp, as Pippin's responseFormat. */
function formatOf(c) {
  if (c === undefined || c === null) return undefined;
  if (c instanceof RegExp) {
    // The pattern matches the whole reply; flags that change what it matches cannot be kept.
    if (/[ims]/.test(c.flags)) throw domError("NotSupportedError", `a responseConstraint RegExp with flags "${c.flags}" is not supported`);
    return { type: "regex", pattern: c.source };
  }
  if (typeof c === "object" || typeof c === "boolean") return { type: "json_schema", schema: c };
  throw domError("TypeError", "responseConstraint is a JSON Schema or a RegExp");
}

/** The input with the constraint said in words (the Prompt API's default). */
function withConstraint(messages, c, omit) {
  if (c === undefined || c === null || omit) return messages;
  const said = c instanceof RegExp ? `Answer with text that matches the regular expression ${c}.` : `Answer with JSON that matches this JSON Schema: ${JSON.stringify(c)}`;
  const last = messages.at(-1);
  return [...messages.slice(0, -1), { ...last, content: `${last.content}\n\n${said}` }];
}

function sampling(o) {
  const topK = o.topK ?? PARAMS.defaultTopK;
  const temperature = o.temperature ?? PARAMS.defaultTemperature;
  if (!(Number.isInteger(topK) && topK >= 1)) throw domError("RangeError", `topK must be an integer of at least 1, not ${topK}`);
  if (!(temperature >= 0)) throw domError("RangeError", `temperature must be at least 0, not ${temperature}`);
  // topK 1 is greedy whatever the temperature.
  return { topK, temperature: topK === 1 ? 0 : temperature };
}

/** A Prompt API session over a Pippin session. */
function sessionClass(modelOf) {
  return class LanguageModel extends EventTarget {
    #s;
    #sampling;
    /** Aborted by destroy(): ends a reply running and any call waiting. */
    #life = new AbortController();
    oncontextoverflow = null;
    onquotaoverflow = null;

    constructor(session, sampling, signal) {
      super();
      this.#s = session;
      this.#sampling = sampling;
      // Said under both names: Chrome's first releases called it `quotaoverflow`.
      session.addEventListener("contextoverflow", () => {
        for (const name of ["contextoverflow", "quotaoverflow"]) {
          const e = new Event(name);
          this[`on${name}`]?.(e);
          this.dispatchEvent(e);
        }
      });
      // The signal a session was created (or cloned) with destroys it when aborted.
      signal?.addEventListener("abort", () => this.destroy(), { once: true, signal: this.#life.signal });
    }

    static async availability(options = {}) {
      if (unsupported(options)) return "unavailable";
      return modelOf.state();
    }

    static async params() {
      return { ...PARAMS };
    }

    static async create(options = {}) {
      const signal = options.signal;
      const bad = unsupported(options);
      if (bad) throw domError("NotSupportedError", `input or output of type ${JSON.stringify(bad)} is not supported: text only`);
      if (signal?.aborted) throw asDom(null, signal);
      const s = sampling(options);
      const monitor = new EventTarget();
      options.monitor?.(monitor);
      try {
        const llm = await modelOf.load(monitor, signal);
        const initial = options.initialPrompts ?? [];
        const messages = initial.length ? messagesOf(initial) : [];
        if (messages.slice(1).some((m) => m.role === "system")) throw domError("TypeError", "a system prompt may only come first");
        const session = await modelOf.exclusive(signal, () => llm.createSession({ messages, ...s, maxTokens: 1 << 20, overflow: "drop-oldest" }));
        if (signal?.aborted) throw asDom(null, signal);
        return new LanguageModel(session, s, signal);
      } catch (e) {
        throw asDom(e, signal);
      }
    }

    get topK() {
      return this.#sampling.topK;
    }
    get temperature() {
      return this.#sampling.temperature;
    }
    get contextUsage() {
      return this.#s.contextUsage;
    }
    get contextWindow() {
      return this.#s.contextWindow;
    }
    // The names of Chrome's earlier releases.
    get inputUsage() {
      return this.contextUsage;
    }
    get inputQuota() {
      return this.contextWindow;
    }

    #options(o, signal) {
      const f = formatOf(o.responseConstraint);
      return { ...(f && { responseFormat: f }), signal };
    }

    /** `f()` in this model's turn, under the session's and the caller's signals. */
    async #call(options, f) {
      if (this.#life.signal.aborted) throw domError("InvalidStateError", "the session was destroyed");
      const signal = either(this.#life.signal, options.signal);
      try {
        return await modelOf.exclusive(signal, () => f(signal));
      } catch (e) {
        throw asDom(e, signal);
      }
    }

    async prompt(input, options = {}) {
      let text = "";
      const reader = this.promptStreaming(input, options).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return text;
        text += value;
      }
    }

    /** A ReadableStream of text pieces (async iterable, as Chrome's); it waits for the
     * model's turn, which it holds until it ends or is cancelled. */
    promptStreaming(input, options = {}) {
      const signal = either(this.#life.signal, options.signal);
      const destroyed = this.#life.signal.aborted;
      let it, release;
      const end = () => {
        release?.();
        release = null;
      };
      const stream = new ReadableStream({
        start: async () => {
          try {
            if (destroyed) throw domError("InvalidStateError", "the session was destroyed");
            const messages = withConstraint(messagesOf(input), options.responseConstraint, options.omitResponseConstraintInput);
            const o = this.#options(options, signal);
            release = await modelOf.turn(signal);
            it = this.#s.promptStreaming(messages, o)[Symbol.asyncIterator]();
          } catch (e) {
            end();
            throw destroyed ? e : asDom(e, signal);
          }
        },
        // Each pull enqueues a piece or closes: a pull that does neither is not called
        // again, and a reader waiting on it would wait forever (its promise collected).
        pull: async (controller) => {
          try {
            for (;;) {
              const { value, done } = await it.next();
              if (done) {
                end();
                return controller.close();
              }
              if (value.done && value.finishReason === "abort") throw asDom(null, signal);
              if (value.text) return controller.enqueue(value.text);
            }
          } catch (e) {
            end();
            controller.error(asDom(e, signal));
          }
        },
        cancel: async () => {
          try {
            await it?.return();
          } finally {
            end();
          }
        },
      });
      // Where the browser's ReadableStream is not async iterable: leaving the loop
      // early cancels the reply, as the native iterator does.
      stream[Symbol.asyncIterator] ??= async function* () {
        const reader = stream.getReader();
        let finished = false;
        try {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) {
              finished = true;
              return;
            }
            yield value;
          }
        } finally {
          if (!finished) await reader.cancel();
          reader.releaseLock();
        }
      };
      return stream;
    }

    async append(input, options = {}) {
      const messages = messagesOf(input);
      await this.#call(options, async (signal) => {
        if (signal.aborted) throw aborted(signal);
        await this.#s.append(messages);
      });
    }

    async measureContextUsage(input, options = {}) {
      const messages = withConstraint(messagesOf(input), options.responseConstraint, options.omitResponseConstraintInput);
      return this.#call(options, async (signal) => (await this.#s.measureContextUsage(messages, this.#options(options, signal))) - this.#s.contextUsage);
    }

    measureInputUsage(input, options) {
      return this.measureContextUsage(input, options);
    }

    async clone(options = {}) {
      const s = await this.#call(options, () => this.#s.clone());
      return new LanguageModel(s, this.#sampling, options.signal);
    }

    /** Ends the session: a reply running and calls waiting reject with AbortError,
     * later calls with InvalidStateError. */
    destroy() {
      if (this.#life.signal.aborted) return;
      this.#life.abort(domError("AbortError", "the session was destroyed"));
      this.#s.destroy();
    }
  };
}

/**
 * Defines `globalThis.LanguageModel` (where the browser has none, or always with
 * `force: true`) backed by the GGUF model at `model`, loaded with the other options as
 * `Pippin.load` takes them on the first `create()`; `worker: true` runs it in a Web
 * Worker (pippin/worker). Returns the class.
 */
export function installPolyfill(options = {}) {
  const { model, force = false, worker = false, ...load } = options;
  if (!model) throw new PippinError("BadOptions", "installPolyfill needs { model: the URL of a GGUF file }");
  let llm = null;
  let loading = null;
  const monitors = new Set();
  const turn = queue();
  const modelOf = {
    turn,
    /** `f()` in the model's turn (see `queue`). */
    async exclusive(signal, f) {
      const release = await turn(signal);
      try {
        return await f();
      } finally {
        release();
      }
    },
    async state() {
      if (llm) return "available";
      if (loading) return "downloading";
      const { Pippin } = await import("./index.js");
      const cached = await Pippin.cached().catch(() => []);
      const url = new URL(String(model), globalThis.location?.href).href;
      return cached.some((c) => c.url === url) ? "available" : "downloadable";
    },
    async load(monitor, signal) {
      monitors.add(monitor);
      const progress = (p) => {
        if (p.phase !== "download" && p.phase !== "upload" && p.phase !== "ready") return;
        for (const m of monitors) {
          const e = new Event("downloadprogress");
          e.loaded = p.phase === "ready" ? 1 : p.fraction;
          e.total = 1;
          m.dispatchEvent(e);
        }
      };
      try {
        loading ??= import(worker ? "./worker.js" : "./index.js")
          .then(({ Pippin }) => Pippin.load(model, { ...load, onProgress: progress }))
          .then((l) => (llm = l))
          .catch((e) => {
            loading = null;
            throw e;
          });
        if (!signal) return await loading;
        let onAbort;
        const abort = new Promise((_, reject) => signal.addEventListener("abort", (onAbort = () => reject(asDom(null, signal))), { once: true }));
        try {
          return await Promise.race([loading, abort]);
        } finally {
          signal.removeEventListener("abort", onAbort);
        }
      } finally {
        monitors.delete(monitor);
      }
    },
  };
  const LanguageModel = sessionClass(modelOf);
  if (force || !globalThis.LanguageModel) globalThis.LanguageModel = LanguageModel;
  return LanguageModel;
}

export default installPolyfill;
