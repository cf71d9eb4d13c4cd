// Every error Pippin throws is a `PippinError`: an `Error` with a stable `code` that
// programs branch on (the message is for people and may change). Errors made by the
// wasm engine are plain `Error`s with the same `name` and `code` (src/wasm), and errors
// that cross from pippin/worker's worker are rebuilt here: `instanceof PippinError`
// is true of all of them.

/** The codes, as docs/javascript.md ("Errors") explains them. */
export const ERROR_CODES = Object.freeze([
  "NoWebGPU", // this browser has no WebGPU (or the page is not a secure context)
  "NoAdapter", // WebGPU is there but gave no GPU adapter or device
  "Download", // fetching or reading the model (or an adapter, or Pippin's own wasm) failed
  "Storage", // a model that loaded could not be kept in Cache Storage (quota, a full disk)
  "InvalidModel", // not a GGUF file, damaged or truncated, or a broken tokenizer
  "Unsupported", // a valid file Pippin cannot run (architecture, tensor type)
  "DeviceLimits", // the model needs more than this GPU allows
  "Busy", // a reply owns the model: the call was refused, not queued
  "ContextFull", // the prompt does not fit in the context (maxContext)
  "BadOptions", // an option, message, schema or argument that cannot be used
  "DeviceLost", // the GPU device, or a CPU worker thread, was lost: load the model again
  "Aborted", // the AbortSignal passed to load() fired
  "Disposed", // the model was disposed
  "Internal", // a bug in Pippin or the browser's GPU stack: please report it
]);

export class PippinError extends Error {
  constructor(code, message, options) {
    super(message, options);
    // An aborted load is also an "AbortError", as fetch's is.
    this.name = code === "Aborted" ? "AbortError" : "PippinError";
    this.code = code;
  }

  static [Symbol.hasInstance](e) {
    return e instanceof Error && (e.name === "PippinError" || e.name === "AbortError") && ERROR_CODES.includes(e.code);
  }
}

/** What a load rejects with once its AbortSignal fired (in both entries). */
export function loadAborted(signal) {
  return new PippinError("Aborted", "Loading the model was aborted.", { cause: signal.reason });
}

/** `e` as a PippinError: itself when it is one, else `code` with its message. */
export function asPippinError(e, code = "Internal") {
  if (e instanceof PippinError) return e;
  return new PippinError(code, e instanceof Error ? e.message : String(e), { cause: e });
}

/** What crosses postMessage (an Error's own properties are not all cloned). */
export function toWire(e) {
  const p = asPippinError(e);
  return { message: p.message, code: p.code };
}

export function fromWire(w) {
  return new PippinError(w.code, w.message);
}
