// Types for Pippin's public JavaScript API.

/**
 * What went wrong, stable across versions (messages are for people and may change):
 * - NoWebGPU: this browser has no WebGPU (or the page is not a secure context)
 * - NoAdapter: WebGPU is there but gave no GPU adapter (none within 15 s counts) or device
 * - Download: fetching or reading the model (or an adapter's files) failed, or Pippin's
 *   own wasm (its guided module, fetched at the first guided reply) could not be fetched
 * - Storage: a model that loaded could not be kept in Cache Storage (over quota, a full
 *   disk); never thrown: the "ready" progress event carries it as `cacheError`
 * - InvalidModel: not a GGUF file, damaged or truncated, or a broken tokenizer
 * - Unsupported: a valid file Pippin cannot run (architecture, tensor type)
 * - DeviceLimits: the model needs more than this GPU allows (buffer size, memory)
 * - Busy: a reply owns the model; the call was refused, not queued
 * - ContextFull: the prompt does not fit in the context (see maxContext)
 * - BadOptions: an option, message, schema or argument that cannot be used
 * - DeviceLost: the GPU device, or a CPU worker thread holding part of the model, was lost; load the model again
 * - Aborted: the AbortSignal given to load() fired
 * - Disposed: the model was disposed
 * - Internal: a bug in Pippin or the browser's GPU stack (please report it)
 */
export type ErrorCode =
  | "NoWebGPU"
  | "NoAdapter"
  | "Download"
  | "Storage"
  | "InvalidModel"
  | "Unsupported"
  | "DeviceLimits"
  | "Busy"
  | "ContextFull"
  | "BadOptions"
  | "DeviceLost"
  | "Aborted"
  | "Disposed"
  | "Internal";

/** Every code, in the order above. */
export declare const ERROR_CODES: readonly ErrorCode[];

/**
 * Every error Pippin throws or rejects with (in both entries): `err.code` says what
 * happened. `name` is "PippinError", or "AbortError" for an aborted load.
 */
export declare class PippinError extends Error {
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown });
  readonly code: ErrorCode;
  name: "PippinError" | "AbortError";
}

export type KvCacheFormat = "int8" | "int4" | "f16" | "f32";

export interface LoadProgress {
  /** "download" (request sent), "upload" (bytes read and sent to the GPU), "compile" (the GPU pipelines), "draft" (the draft model's bytes, `LoadOptions.draft`), "ready". */
  phase: "download" | "upload" | "compile" | "draft" | "ready";
  /** Bytes of the model file read so far. */
  loaded: number;
  /** Size of the file in bytes; 0 when the server does not say. */
  total: number;
  /** loaded / total, 0 when the total is unknown. */
  fraction: number;
  /** On "ready": why the model, which loaded, could not be kept in Cache Storage (code
   * "Storage": over the site's quota, a full disk; the message says how much was
   * needed and what `navigator.storage.estimate()` says is left). */
  cacheError?: PippinError;
}

/** Where the model runs: "webgpu" on the GPU, "cpu" in wasm (SIMD128) on the CPU. */
export type Backend = "webgpu" | "cpu";

export interface LoadOptions {
  onProgress?: (p: LoadProgress) => void;
  /**
   * "auto" (default): WebGPU on a hardware adapter; the CPU backend where WebGPU is
   * missing, gives no adapter, or only a software one (SwiftShader). "webgpu" fails with
   * code "NoWebGPU"/"NoAdapter" where there is none; "cpu" never touches WebGPU.
   */
  backend?: "auto" | Backend;
  /**
   * Threads of the CPU backend (default: `navigator.hardwareConcurrency`, at most 4):
   * helper Web Workers, each holding a slice of every large matrix's rows. They need a
   * cross-origin isolated page (`Cross-Origin-Opener-Policy: same-origin`,
   * `Cross-Origin-Embedder-Policy: require-corp`); elsewhere one thread runs, and
   * `info().threadsReason` says why.
   */
  threads?: number;
  /** KV cache format (default "int8"; the CPU backend: "f32", else int8). */
  kvCache?: KvCacheFormat;
  /** Most tokens a conversation may hold (default 2048, at most the model's context). */
  maxContext?: number;
  /**
   * Hold Pippin to less than the GPU allows, to see a model as a smaller device runs
   * it: `maxStorageBufferBindingSize` (bytes, at least 65536) splits every larger
   * tensor across bindings and refuses (code "DeviceLimits", before the weights are
   * downloaded) a model whose KV cache or tables do not fit one binding at
   * `maxContext`. That check is always made against the GPU's own limits.
   */
  gpuLimits?: { maxStorageBufferBindingSize?: number };
  /** Keep a downloaded model in Cache Storage and load from there next time (default true). */
  cache?: boolean;
  /** Where pippin_wasm_bg.wasm is served, when not beside index.js. */
  wasmUrl?: string | URL;
  /** Where pippin_guided_bg.wasm (guided generation's compiler, fetched on the first
   * reply with a responseFormat or tools) is served, when not beside pippin_guided.js. */
  guidedWasmUrl?: string | URL;
  /** Aborting stops the download and the load: it rejects with code "Aborted" (name "AbortError"). */
  signal?: AbortSignal;
  /**
   * A draft model for speculative decoding: a smaller model of the same vocabulary
   * (a file as `load`'s source takes it), run ahead on the CPU backend to propose the
   * tokens the model checks in one forward, instead of prompt lookup. Replies are the
   * same text either way. Another vocabulary fails the load with code "BadOptions".
   * On the WebGPU backend it is not downloaded (`info().draftReason` says why).
   */
  draft?: ModelFile | ModelFile[];
  /**
   * Bytes of KV state kept for sessions not running now and for common prefixes (a
   * system prompt), least recently used dropped first and recomputed when needed
   * (default: about one int8 KV cache at `maxContext`; 0 keeps none).
   */
  sessionMemory?: number;
}

export interface GenerateOptions {
  /** Most new tokens (default 256). */
  maxTokens?: number;
  /** 0 = greedy (default). */
  temperature?: number;
  /** Keep the k most likely tokens (0 = no limit; sampling considers at most 64). */
  topK?: number;
  topP?: number;
  minP?: number;
  /** > 1 discourages the last 64 tokens. */
  repetitionPenalty?: number;
  seed?: number;
  /** Stop before any of these strings (not included in the text). */
  stop?: string | string[];
  /** Aborting ends the reply within one step with finishReason "abort". */
  signal?: AbortSignal;
  /** A loaded adapter's name for this call, or null for the base model (default: the active one). */
  adapter?: string | null;
  /**
   * Guided generation: the reply has this shape, guaranteed token by token; it ends
   * (finishReason "stop") when the shape is complete. An invalid or unsatisfiable
   * format rejects before any token. `maxTokens` can still cut a reply short ("length").
   */
  responseFormat?: ResponseFormat;
  /**
   * Tools the model may call (`chat` only). They are rendered by the model's own chat
   * template when it supports tools (Qwen3, Llama 3.x, Hermes-style), otherwise
   * described in a system message; a call is generated under a grammar built from
   * them (a tool offered, arguments valid under its schema) and ends the reply with
   * finishReason "tool_calls" and `toolCalls` (its text is not streamed).
   */
  tools?: ChatCompletionTool[];
  /** "auto" (default: a call or an answer), "required", "none", or one tool by name. */
  toolChoice?: "none" | "auto" | "required" | { type: "function"; function: { name: string } };
  /**
   * Speculative decoding: "auto" (default) guesses the next tokens from the
   * conversation so far (prompt lookup) and checks several in one forward where the
   * backend can (the CPU backend), as many as this reply's measured cost of a check
   * and rate of kept guesses make worth it; "on" guesses at every match, paying or
   * not; "off" runs one token a forward. The text is the same in every case, token
   * for token, seeded sampling included; replies that copy from their input come faster.
   */
  speculation?: "auto" | "on" | "off";
  /**
   * Each token's log-probability (the model's: the log-softmax of its logits over the
   * whole vocabulary, before `logitBias`, the penalty, the temperature and a
   * `responseFormat`) with the `logprobs` (0 to 20) most likely tokens at its
   * position, on each chunk as `logprobs`. The backend then returns every logit a
   * step (on the GPU: read back, no pipelined steps); the text is the same.
   */
  logprobs?: number;
  /** Added to these tokens' logits before sampling: `{ [tokenId]: -100 to 100 }`
   * (-100 bans a token, 100 all but forces it), as OpenAI's `logit_bias`. */
  logitBias?: Record<number, number>;
}

/** A generated token's log-probability (see `GenerateOptions.logprobs`). */
export interface TokenLogprob {
  tokenId: number;
  /** Its text (a partial character reads as U+FFFD; `bytes` are exact). */
  token: string;
  bytes: number[];
  logprob: number;
  /** Most likely first. */
  topLogprobs: { tokenId: number; token: string; bytes: number[]; logprob: number }[];
}

/**
 * The shape of a guided reply. JSON: compact, numbers with at most 6 fractional digits
 * unless the schema sets `multipleOf`, unbounded numbers kept within ±1e15. A keyword the grammar cannot express (e.g.
 * `uniqueItems`) is an error unless `strict` is false (then it is ignored).
 */
export type ResponseFormat =
  | { type: "json_schema"; schema: object | boolean; strict?: boolean }
  | { type: "json_object" }
  | { type: "regex"; pattern: string }
  /** llguidance's Lark dialect, e.g. `start: "yes" | "no"`. */
  | { type: "grammar"; grammar: string }
  | { type: "text" };

// OpenAI's chat API (`llm.chat.completions.create`), the subset Pippin implements.

export interface ChatCompletionTool {
  type: "function";
  function: { name: string; description?: string; parameters?: object };
}

export interface ChatCompletionMessageToolCall {
  id: string;
  type: "function";
  function: { name: string; /** JSON text. */ arguments: string };
}

export type ChatCompletionMessageParam =
  | { role: "system" | "developer" | "user"; content: string | { type: "text"; text: string }[] }
  | { role: "assistant"; content?: string | null; tool_calls?: ChatCompletionMessageToolCall[] }
  | { role: "tool"; content: string; tool_call_id: string };

export interface ChatCompletionCreateParams {
  messages: ChatCompletionMessageParam[];
  model?: string;
  stream?: boolean;
  max_tokens?: number;
  max_completion_tokens?: number;
  /** Default 1, as OpenAI's; 0 is greedy. */
  temperature?: number;
  top_p?: number;
  seed?: number;
  stop?: string | string[];
  n?: 1;
  response_format?:
    | { type: "text" }
    | { type: "json_object" }
    | { type: "json_schema"; json_schema: { name: string; description?: string; schema: object; strict?: boolean | null } };
  tools?: ChatCompletionTool[];
  tool_choice?: "none" | "auto" | "required" | { type: "function"; function: { name: string } };
  /** Pippin's: a loaded LoRA adapter's name, or null for the base model. */
  adapter?: string | null;
  /** Pippin's: speculative decoding (see GenerateOptions). */
  speculation?: "auto" | "on" | "off";
  /** Each token's log-probability on `choices[0].logprobs.content`; `top_logprobs`
   * (0 to 20) alternatives with each. */
  logprobs?: boolean | null;
  top_logprobs?: number | null;
  /** Token id (as a string key) to a bias from -100 to 100. */
  logit_bias?: Record<string, number> | null;
}

/** OpenAI's log-probability of a token (`top_logprobs` without their own). */
export interface ChatCompletionTokenLogprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs: { token: string; logprob: number; bytes: number[] | null }[];
}

export type ChatCompletionLogprobs = { content: ChatCompletionTokenLogprob[] | null; refusal: null } | null;

export type FinishReasonOpenAI = "stop" | "length" | "tool_calls" | "abort";

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: {
    index: 0;
    message: { role: "assistant"; content: string | null; tool_calls?: ChatCompletionMessageToolCall[] };
    finish_reason: FinishReasonOpenAI;
    logprobs: ChatCompletionLogprobs;
  }[];
  usage: CompletionUsage;
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: {
    index: 0;
    delta: { role?: "assistant"; content?: string; tool_calls?: (ChatCompletionMessageToolCall & { index: number })[] };
    finish_reason: FinishReasonOpenAI | null;
    logprobs: ChatCompletionLogprobs;
  }[];
  /** On the last chunk. */
  usage?: CompletionUsage;
}

export interface ChatCompletions {
  create(params: ChatCompletionCreateParams & { stream: true }, options?: { signal?: AbortSignal }): Promise<AsyncIterable<ChatCompletionChunk>>;
  create(params: ChatCompletionCreateParams & { stream?: false | null }, options?: { signal?: AbortSignal }): Promise<ChatCompletion>;
}

/** `llm.chat(messages, options)`, with OpenAI's API as `llm.chat.completions.create`. */
export interface Chat {
  (messages: Message[], options?: GenerateOptions): Reply;
  completions: ChatCompletions;
}

export type AdapterFile = string | URL | Response | Blob | ArrayBuffer | Uint8Array;

export interface AdapterInfo {
  name: string;
  /** GPU memory it takes. */
  bytes: number;
  rank: number;
  active: boolean;
}

export interface Usage {
  promptTokens: number;
  /** Prompt tokens reused from the KV cache of the previous turn. */
  cachedTokens: number;
  generatedTokens: number;
  prefillMs: number;
  decodeMs: number;
  /** From the call to the reply's first text (template, tokens and prompt included). */
  timeToFirstTokenMs: number;
  speculation: SpeculationStats;
}

/** What speculative decoding did over a reply: guesses checked (`proposed`), guesses
 * that were the token picked (`accepted`), and the model's forwards while decoding
 * (a check of several guesses is one): tokens per forward is
 * `generatedTokens / (forwards + 1)` with the prefill's first token. */
export interface SpeculationStats {
  proposed: number;
  accepted: number;
  forwards: number;
}

export type Chunk =
  | { text: string; tokenId: number; done: false; /** With `logprobs`: this piece's tokens. */ logprobs?: TokenLogprob[] }
  | { text: ""; done: true; finishReason: "stop" | "length" | "abort" | "tool_calls"; usage: Usage; toolCalls?: ToolCall[] };

/** A call the model made: arguments as an object (valid under the tool's schema). */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: Record<string, unknown> };
}

/** A chat turn (OpenAI's message shape is accepted as well: content parts, tool calls, tool results). */
export interface Message {
  role: "system" | "user" | "assistant" | "tool" | string;
  content: string | null | { type: "text"; text: string }[];
  tool_calls?: (ToolCall | ChatCompletionMessageToolCall)[];
  tool_call_id?: string;
}

/** A streamed reply: `for await (const c of reply)`, `reply.stream()` or `await reply.text()`. */
export interface Reply extends AsyncIterable<Chunk> {
  stream(): ReadableStream<Chunk>;
  text(): Promise<string>;
}

export interface Stats {
  prefillTokensPerS: number;
  decodeTokensPerS: number;
  /** The current or last reply's time from `generate`/`chat` to its first text
   * (template, tokens and prompt included); 0 before any. */
  timeToFirstTokenMs: number;
  /** Where the load's time went: `totalMs` from `Pippin.load` to ready; `weightsMs`
   * the header and weights, downloaded (or read from the cache) and uploaded as they
   * arrive, of which `headerCompileMs` created every GPU pipeline from the header
   * before the first weight byte (they compile while the weights download);
   * `compileMs` the recorded decode step after the weights (0 on the CPU). */
  load: { totalMs: number; weightsMs: number; headerCompileMs: number; compileMs: number };
  weightBytes: number;
  kvCacheBytes: number;
  contextTokens: number;
  /** GPU dispatches per decode step. */
  dispatchesPerToken: number;
  /** The current or last reply's speculative decoding. */
  speculation: SpeculationStats;
  /** Bytes of the GPU buffers this model holds, by kind (weights as uploaded). */
  gpuBytes: { weights: number; kvCache: number; scratch: number; adapters: number };
  /** The prefix cache: snapshots of KV state kept for sessions and common prefixes,
   * their bytes, its budget (`sessionMemory`), and prompt tokens served from it. */
  prefixCache: { entries: number; bytes: number; budget: number; restoredTokens: number };
  /** Heap bytes the wasm module has allocated now (all models of the page's module). */
  wasmHeapBytes: number;
  /** The most heap allocated at once since the last `Pippin.load` began. */
  wasmHeapPeakBytes: number;
  /** The wasm module's linear memory: its high-water mark (it never shrinks). */
  wasmMemoryBytes: number;
}

export interface Info {
  config: {
    arch: string;
    nLayers: number;
    nHeads: number;
    nKvHeads: number;
    headDim: number;
    hidden: number;
    ffnDim: number;
    vocabSize: number;
    contextLength: number;
    [key: string]: unknown;
  };
  /** The backend that runs the model, and why it was chosen. */
  backend: Backend;
  backendReason: string;
  /** Threads the CPU backend runs on (1 on WebGPU), and why that many. */
  threads: number;
  threadsReason: string;
  /** Whether a draft model (`LoadOptions.draft`) proposes speculative decoding's guesses, and why not when one was given. */
  draft: boolean;
  draftReason?: string;
  /** The WebGPU adapter's name ("adapter" elsewhere in this API means a LoRA adapter); "" on the CPU. */
  gpuAdapter: string;
  /** wgpu's backend ("BrowserWebGpu"); "" on the CPU. */
  gpuBackend: string;
  shaderF16: boolean;
  subgroups: boolean;
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  /** Most tokens a conversation may hold (`maxContext`, at most the model's). */
  contextWindow: number;
  /**
   * The accuracy-recovery adapter the model's file carries (`pippin convert --recover`):
   * it runs under every reply, and adapters loaded with `loadAdapter` stack on it.
   * `null` when the file has none.
   */
  recovery: { rank: number; bytes: number } | null;
}

/** What a prefill ran: prompt tokens found cached (the KV cache or a kept snapshot) and computed. */
export interface Prefilled {
  cachedTokens: number;
  computedTokens: number;
}

export interface SessionOptions extends Omit<GenerateOptions, "signal"> {
  /** The system prompt (the conversation's first message). */
  system?: string;
  /** The conversation so far, run when the session is created. */
  messages?: (Message | string)[];
  /** A prompt that does not fit the context: "error" (default; code "ContextFull") or
   * "drop-oldest" (the oldest messages after the system prompt are dropped, with a
   * `contextoverflow` event). */
  overflow?: "error" | "drop-oldest";
}

export type SessionInput = string | Message | (Message | string)[];

/** A conversation on a loaded model. Several may exist; one reply runs at a time per
 * model (others reject with "Busy"). Switching sessions restores each one's KV state
 * from the prefix cache (within `sessionMemory`), else recomputes it. */
export declare class Session extends EventTarget {
  readonly contextWindow: number;
  /** Tokens the conversation holds (its next prompt without the new input). */
  readonly contextUsage: number;
  readonly messages: Message[];
  oncontextoverflow: ((e: Event & { droppedMessages: number }) => void) | null;
  /** The reply to `input`; both join the conversation when it ends (not when aborted). */
  prompt(input: SessionInput, options?: GenerateOptions): Promise<string>;
  promptStreaming(input: SessionInput, options?: GenerateOptions): Reply;
  /** Adds messages and runs them now; the reply comes with a later prompt. */
  append(input: SessionInput, options?: GenerateOptions): Promise<Prefilled>;
  measureContextUsage(input: SessionInput, options?: GenerateOptions): Promise<number>;
  /** A session with this one's conversation and options; the two go on apart. */
  clone(options?: GenerateOptions): Promise<Session>;
  /** The conversation and its KV cache, for `restoreSession` in a later page (same
   * model, adapter, KV format and backend; else "BadOptions"). */
  save(): Promise<Uint8Array>;
  destroy(): void;
}

/** One GGUF file. */
export type ModelFile = string | URL | Response | Blob | ArrayBuffer | Uint8Array;

export declare class Pippin {
  /** Loads a GGUF model from a URL, a Response, a Blob/File or bytes onto the GPU (or
   * into memory for the CPU backend); a split model from its files in order, or from
   * the URL of its first file (`…-00001-of-000NN.gguf`). */
  static load(source: ModelFile | ModelFile[], options?: LoadOptions): Promise<Pippin>;
  /** Models kept in Cache Storage. */
  static cached(): Promise<{ url: string; bytes: number }[]>;
  /** Removes a model from Cache Storage: every file of a split model, given its first
   * file's URL or all its URLs. True when any of it was there. */
  static evict(url: string | URL | (string | URL)[]): Promise<boolean>;
  /** `evict`, under its first name. */
  static deleteCached(url: string): Promise<boolean>;
  /**
   * Continues `prompt` (no chat template). A reply owns the model until it ends (done,
   * stopped, aborted, or let go of with `break`/`return()`): meanwhile every other
   * generate/chat/adapter change/reset/dispose rejects with code "Busy".
   */
  generate(prompt: string, options?: GenerateOptions): Reply;
  /**
   * The assistant's reply to `messages` in the model's chat template; the previous
   * turn's KV cache is reused. `chat.completions.create` is OpenAI's chat API.
   */
  chat: Chat;
  /** A new conversation (its system prompt and messages run now). */
  createSession(options?: SessionOptions): Promise<Session>;
  /** A session `session.save()` wrote. */
  restoreSession(bytes: Uint8Array | ArrayBuffer): Promise<Session>;
  /** Computes a conversation's start now, for every session that starts with it. */
  prewarm(prefix: { system?: string; messages?: (Message | string)[]; tools?: GenerateOptions["tools"]; adapter?: string | null }): Promise<Prefilled>;
  /** Runs what the KV cache lacks of `messages`, without a reply. */
  prefill(messages: Message[], options?: GenerateOptions): Promise<Prefilled>;
  /** Tokens of the prompt `chat(messages, options)` runs. */
  countTokens(messages: Message[], options?: GenerateOptions): Promise<number>;
  /** `messages`' KV cache as bytes (a session's `save` adds its transcript). */
  saveState(messages: Message[], options?: GenerateOptions): Promise<Uint8Array>;
  /** Holds `saveState`'s bytes again; resolves to the tokens they hold. */
  restoreState(bytes: Uint8Array): Promise<number>;
  /** Loads a PEFT LoRA adapter: a folder URL, or its two files. Switching adapters costs no reload. */
  loadAdapter(
    name: string,
    source: string | URL | { config: AdapterFile | object; weights: AdapterFile },
    options?: { onProgress?: (p: { phase: string; loaded: number; total: number; fraction: number }) => void },
  ): Promise<void>;
  /** The adapter used when a call passes none; null for the base model. */
  useAdapter(name: string | null): void;
  /** Frees an adapter's GPU memory; false when none had that name. */
  unloadAdapter(name: string): boolean;
  adapters(): AdapterInfo[];
  stats(): Stats;
  info(): Info;
  /** Forgets the conversation. */
  reset(): void;
  /** Frees the GPU memory. Refused while a reply runs (abort it, or let it finish). */
  dispose(): Promise<void>;
}

export default Pippin;
