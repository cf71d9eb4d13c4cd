// `pippin/worker`: the same API as "pippin", with the engine in a Web Worker.
// stats(), info() and reset() return Promises here (they cross to the worker).
import type { AdapterFile, AdapterInfo, Chat, GenerateOptions, Info, LoadOptions, Message, ModelFile, Prefilled, Reply, Session, SessionOptions, Stats } from "./index.js";

export * from "./index.js";

export declare class Pippin {
  static load(source: ModelFile | ModelFile[], options?: LoadOptions): Promise<Pippin>;
  static cached(): Promise<{ url: string; bytes: number }[]>;
  static evict(url: string | URL | (string | URL)[]): Promise<boolean>;
  static deleteCached(url: string): Promise<boolean>;
  generate(prompt: string, options?: GenerateOptions): Reply;
  chat: Chat;
  createSession(options?: SessionOptions): Promise<Session>;
  restoreSession(bytes: Uint8Array | ArrayBuffer): Promise<Session>;
  prewarm(prefix: { system?: string; messages?: (Message | string)[]; tools?: GenerateOptions["tools"]; adapter?: string | null }): Promise<Prefilled>;
  prefill(messages: Message[], options?: GenerateOptions): Promise<Prefilled>;
  countTokens(messages: Message[], options?: GenerateOptions): Promise<number>;
  saveState(messages: Message[], options?: GenerateOptions): Promise<Uint8Array>;
  restoreState(bytes: Uint8Array): Promise<number>;
  loadAdapter(name: string, source: string | URL | { config: AdapterFile | object; weights: AdapterFile }): Promise<void>;
  useAdapter(name: string | null): Promise<void>;
  unloadAdapter(name: string): Promise<boolean>;
  adapters(): Promise<AdapterInfo[]>;
  stats(): Promise<Stats>;
  info(): Promise<Info>;
  reset(): Promise<void>;
  dispose(): Promise<void>;
}

export default Pippin;
