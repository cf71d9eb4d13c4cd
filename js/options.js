// The options of a reply as `generate`, `chat` and sessions take them, listed once for
// both entries and the sessions (pippin/worker forwards them as the page gave them).

/** The engine's generation options (GenerateOptions in index.d.ts). */
export const GENERATE_OPTIONS = ["maxTokens", "temperature", "topK", "topP", "minP", "repetitionPenalty", "seed", "stop", "responseFormat", "tools", "toolChoice", "speculation", "logprobs", "logitBias"];

/** The keys of `o` among `keys` that are set. */
export function pick(o, keys) {
  const out = {};
  for (const k of keys) if (o?.[k] !== undefined) out[k] = o[k];
  return out;
}

/** The generation options of `o`, as the engine reads them (`stop` as a list). */
export function generationOptions(o = {}) {
  const out = pick(o, GENERATE_OPTIONS);
  if (typeof out.stop === "string") out.stop = [out.stop];
  return out;
}
