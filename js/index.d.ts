// Types for Pippin's public JavaScript API.

export type KvCacheFormat = "int8" | "int4" | "f16" | "f32";

export interface LoadProgress {
  /** "download" (request sent), "upload" (bytes read and sent to the GPU), "compile" (the GPU pipelines), "ready". */
  phase: "download" | "upload" | "compile" | "ready";
  /** Bytes of the model file read so far. */
  loaded: number;
  /** Size of the file in bytes; 0 when the server does not say. */
  total: number;
  /** loaded / total, 0 when the total is unknown. */
  fraction: number;
}

export interface LoadOptions {
  onProgress?: (p: LoadProgress) => void;
  /** KV cache format on the GPU (default "int8"). */
  kvCache?: KvCacheFormat;
  /** Most tokens a conversation may hold (default 2048, at most the model's context). */
  maxContext?: number;
  /** Keep a downloaded model in Cache Storage and load from there next time (default true). */
  cache?: boolean;
  /** Where pippin_wasm_bg.wasm is served, when not beside index.js. */
  wasmUrl?: string | URL;
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
}

export type Chunk =
  | { text: string; tokenId: number; done: false }
  | { text: ""; done: true; finishReason: "stop" | "length" | "abort"; usage: Usage };

export interface Message {
  role: "system" | "user" | "assistant" | string;
  content: string;
}

/** A streamed reply: `for await (const c of reply)`, `reply.stream()` or `await reply.text()`. */
export interface Reply extends AsyncIterable<Chunk> {
  stream(): ReadableStream<Chunk>;
  text(): Promise<string>;
}

export interface Stats {
  prefillTokensPerS: number;
  decodeTokensPerS: number;
  weightBytes: number;
  kvCacheBytes: number;
  contextTokens: number;
  /** GPU dispatches per decode step. */
  dispatchesPerToken: number;
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
  /** The WebGPU adapter's name ("adapter" elsewhere in this API means a LoRA adapter). */
  gpuAdapter: string;
  backend: string;
  shaderF16: boolean;
  subgroups: boolean;
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
}

export declare class Pippin {
  /** Loads a GGUF model from a URL, a Response, a Blob/File or bytes onto the GPU. */
  static load(source: string | URL | Response | Blob | ArrayBuffer | Uint8Array, options?: LoadOptions): Promise<Pippin>;
  /** Models kept in Cache Storage. */
  static cached(): Promise<{ url: string; bytes: number }[]>;
  static deleteCached(url: string): Promise<boolean>;
  /**
   * Continues `prompt` (no chat template). A reply owns the model until it ends (done,
   * stopped, aborted, or let go of with `break`/`return()`): meanwhile every other
   * generate/chat/adapter change/reset/dispose rejects with "already generating".
   */
  generate(prompt: string, options?: GenerateOptions): Reply;
  /** The assistant's reply to `messages` in the model's chat template; the previous turn's KV cache is reused. */
  chat(messages: Message[], options?: GenerateOptions): Reply;
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
