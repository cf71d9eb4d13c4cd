// `pippin/prompt-api`: Chrome's Prompt API (`LanguageModel`) on a Pippin model, in
// every browser. Shapes as Chrome documents them; text input and output only.
import type { LoadOptions } from "./index.js";

export type Availability = "unavailable" | "downloadable" | "downloading" | "available";

export interface LanguageModelExpected {
  type: "text" | "image" | "audio";
  languages?: string[];
}

export interface LanguageModelMessage {
  role: "system" | "user" | "assistant";
  content: string | { type: "text"; value: string }[];
}

export type LanguageModelPrompt = string | LanguageModelMessage[];

export interface LanguageModelCreateOptions {
  initialPrompts?: LanguageModelMessage[];
  /** `topK: 1` is greedy whatever the temperature. Defaults: `params()`. */
  topK?: number;
  temperature?: number;
  signal?: AbortSignal;
  /** Gets an EventTarget that receives `downloadprogress` events (`loaded`, 0 to 1). */
  monitor?: (m: EventTarget) => void;
  expectedInputs?: LanguageModelExpected[];
  expectedOutputs?: LanguageModelExpected[];
}

export interface LanguageModelPromptOptions {
  signal?: AbortSignal;
  /** A JSON Schema or a RegExp the reply must match. */
  responseConstraint?: object | boolean | RegExp;
  /** Leave the constraint out of the prompt's text (by default it is said in words). */
  omitResponseConstraintInput?: boolean;
}

export declare class LanguageModel extends EventTarget {
  static availability(options?: LanguageModelCreateOptions): Promise<Availability>;
  static params(): Promise<{ defaultTopK: number; maxTopK: number; defaultTemperature: number; maxTemperature: number }>;
  static create(options?: LanguageModelCreateOptions): Promise<LanguageModel>;
  readonly topK: number;
  readonly temperature: number;
  readonly contextUsage: number;
  readonly contextWindow: number;
  readonly inputUsage: number;
  readonly inputQuota: number;
  /** Older turns were dropped so the next prompt fits. */
  oncontextoverflow: ((e: Event) => void) | null;
  /** The same event under Chrome's earlier name. */
  onquotaoverflow: ((e: Event) => void) | null;
  prompt(input: LanguageModelPrompt, options?: LanguageModelPromptOptions): Promise<string>;
  promptStreaming(input: LanguageModelPrompt, options?: LanguageModelPromptOptions): ReadableStream<string> & AsyncIterable<string>;
  append(input: LanguageModelPrompt, options?: { signal?: AbortSignal }): Promise<void>;
  measureContextUsage(input: LanguageModelPrompt, options?: LanguageModelPromptOptions): Promise<number>;
  measureInputUsage(input: LanguageModelPrompt, options?: LanguageModelPromptOptions): Promise<number>;
  clone(options?: { signal?: AbortSignal }): Promise<LanguageModel>;
  destroy(): void;
}

/**
 * Defines `globalThis.LanguageModel` backed by the GGUF model at `model` (where the
 * browser has none, or always with `force: true`); the model loads on the first
 * `create()` with `Pippin.load`'s other options; `worker: true` runs it in a Web
 * Worker. Returns the class.
 */
export declare function installPolyfill(options: LoadOptions & { model: string | URL; force?: boolean; worker?: boolean }): typeof LanguageModel;
export default installPolyfill;
