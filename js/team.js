// The CPU backend on several cores: helper Web Workers (thread.js), each its own wasm
// instance holding a slice of every large matrix's rows, and this thread (the lead)
// running the rest of the model. A matmul is one round through a SharedArrayBuffer:
// the lead writes the activations and bumps GEN, each helper multiplies them by its
// rows and writes its outputs, the lead waits for DONE to count them all. Shared
// memory needs a cross-origin isolated page (COOP + COEP headers).

export const GEN = 0, DONE = 1, KIND = 2, ID = 3, COUNT = 4, COLS = 5, FAILED = 6;
export const MATMUL = 1, ROWS = 2, STOP = 3, EXIT = 4;
/** Bytes before the data: the control words, then a failed helper's message. */
export const ERROR_AT = 64, ERROR_BYTES = 1024, DATA_AT = 2048;
/** f32 values a round carries (16 MiB): a ~3B model's prefill of 128 tokens through
 * its FFN in one round, its head over ~100 positions. */
const CAPACITY = 4 << 20;
/** More threads than this measured no faster (memory bandwidth, not cores, bounds a
 * matmul) — and each is a wasm instance with its own code and heap. */
export const MAX_THREADS = 4;

const NOT_ISOLATED =
  "the page is not cross-origin isolated, so it has no SharedArrayBuffer: serve it with " +
  "Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp " +
  "(or credentialless) to run the CPU backend on every core";

/** Whether this thread may block in Atomics.wait (a worker) or must spin (a page). */
function canBlock() {
  try {
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 1, 0);
    return true;
  } catch {
    return false;
  }
}

/** A promise of `worker`'s first message, rejected on its error or after `ms`. */
function answer(worker, ms) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms);
    worker.onmessage = (e) => {
      clearTimeout(timer);
      if (e.data.error) reject(new Error(e.data.error));
      else resolve(e.data);
    };
    worker.onerror = (e) => {
      clearTimeout(timer);
      e.preventDefault?.();
      reject(new Error(e.message || "its script did not load"));
    };
  });
}

export class Team {
  #workers;
  #ctrl;
  #data;
  #words;
  #block = canBlock();
  #began = 0;
  #broken = null;

  constructor(workers, sab) {
    this.#workers = workers;
    this.#ctrl = new Int32Array(sab, 0, 16);
    this.#data = new Float32Array(sab, DATA_AT);
    this.#words = new Uint32Array(sab, DATA_AT);
    this.sab = sab;
  }

  helpers() {
    return this.#workers.length;
  }

  /** Helper `k` (1-based) stops answering, as a crashed worker would: tests see the
   * model fail cleanly. (Chromium does not end a worker blocked in Atomics.wait on
   * terminate(); a crash or a trap inside it is what this stands for.) */
  exit(k) {
    this.#go(EXIT, k, 0, 0);
    // Until helper k has read it: a round started sooner would overwrite KIND, and the
    // helper would take that round instead (a test hook: a short spin is fine).
    const until = performance.now() + 5000;
    while (Atomics.load(this.#ctrl, DONE) < 1 && performance.now() < until);
  }

  capacity() {
    return this.#data.length;
  }

  /** Sends helper `k` its rows of a matrix (`bytes` is a view of the lead's memory:
   * copied, and the copy moved to the worker). */
  give(k, id, ty, first, slot, cols, bytes) {
    const copy = bytes.slice();
    this.#workers[k].postMessage({ give: { id, ty, first, slot, cols, bytes: copy } }, [copy.buffer]);
  }

  #go(kind, id, count, cols) {
    const c = this.#ctrl;
    c[KIND] = kind;
    c[ID] = id;
    c[COUNT] = count;
    c[COLS] = cols;
    Atomics.store(c, DONE, 0);
    Atomics.add(c, GEN, 1);
    Atomics.notify(c, GEN);
    this.#began = performance.now();
  }

  start(id, x, cols) {
    if (this.#broken) return;
    this.#data.set(x);
    this.#go(MATMUL, id, x.length / cols, cols);
  }

  startRows(id, rows) {
    if (this.#broken) return;
    this.#words.set(rows);
    this.#go(ROWS, id, rows.length, 0);
  }

  /** Waits for every helper, then copies the gathered outputs into `out`; the reason
   * when one failed or has not answered in 20 times the lead's own share (≥ 5 s). */
  finish(out) {
    if (this.#broken) return this.#broken;
    const c = this.#ctrl;
    const now = performance.now();
    const deadline = now + Math.max(5000, 20 * (now - this.#began));
    for (let done; (done = Atomics.load(c, DONE)) < this.#workers.length; ) {
      const left = deadline - performance.now();
      if (left <= 0) return (this.#broken = `a worker did not answer within ${Math.round(deadline - now)} ms`);
      // A worker sleeps (see thread.js); a page may not block, so it spins.
      if (this.#block) Atomics.wait(c, DONE, done, Math.min(left, 100));
    }
    if (Atomics.load(c, FAILED)) {
      const bytes = new Uint8Array(this.sab, ERROR_AT, ERROR_BYTES);
      const text = new TextDecoder().decode(bytes.slice()).replace(/\0+$/, "");
      return (this.#broken = `worker ${Atomics.load(c, FAILED)}: ${text}`);
    }
    const kind = c[KIND];
    const at = kind === MATMUL ? c[COUNT] * c[COLS] : c[COUNT];
    out.set(this.#data.subarray(at, at + out.length));
    return null;
  }

  failure() {
    return this.#broken;
  }

  /** Resolves once every helper holds its slices and waits for rounds. */
  async ready() {
    await Promise.all(
      this.#workers.map((w) => {
        const a = answer(w, 60_000);
        w.postMessage({ run: true });
        return a;
      }),
    );
  }

  /** Ends the helpers (their slices go with them). */
  close() {
    this.#broken ??= "the model was disposed";
    Atomics.store(this.#ctrl, KIND, STOP);
    Atomics.add(this.#ctrl, GEN, 1);
    Atomics.notify(this.#ctrl, GEN);
    for (const w of this.#workers) w.terminate();
  }
}

/**
 * The threads the CPU backend gets: `{ team, count, reason }`. `team` is null for one
 * thread, and `reason` says why (not isolated, one core, asked for, workers failed).
 */
export async function startTeam(asked, wasmUrl) {
  const cores = globalThis.navigator?.hardwareConcurrency || 1;
  const count = asked ?? Math.min(cores, MAX_THREADS);
  const why = asked ? `threads: ${asked} was asked for` : `navigator.hardwareConcurrency is ${cores} (at most ${MAX_THREADS} by default)`;
  if (count <= 1) return { team: null, count: 1, reason: why };
  if (!globalThis.crossOriginIsolated || typeof SharedArrayBuffer !== "function") {
    return { team: null, count: 1, reason: NOT_ISOLATED };
  }
  let sab;
  const workers = [];
  try {
    sab = new SharedArrayBuffer(DATA_AT + 4 * CAPACITY);
    for (let k = 0; k < count - 1; k++) {
      // Written inline as bundlers recognize it (see worker.js).
      workers.push(new Worker(new URL("./thread.js", import.meta.url), { type: "module" }));
    }
    await Promise.all(
      workers.map((w, k) => {
        const a = answer(w, 30_000);
        w.postMessage({ init: { sab, index: k + 1, helpers: count - 1, wasmUrl } });
        return a;
      }),
    );
  } catch (e) {
    for (const w of workers) w.terminate();
    return { team: null, count: 1, reason: `worker threads did not start (${e.message})` };
  }
  return { team: new Team(workers, sab), count, reason: why };
}
