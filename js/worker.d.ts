// `pippin/worker`: the same API as "pippin", with the engine in a Web Worker. Its types
// are derived from index.d.ts (the one source): every method of a model answers a
// Promise here, since it crosses to the worker (stats(), info(), reset(), adapters(),
// useAdapter() and unloadAdapter() included); replies and chat stay as they are.
import type { Pippin as InPage, Reply } from "./index.js";

export * from "./index.js";

/** A method's result as the worker gives it. */
type Crossed<R> = R extends Promise<unknown> | Reply ? R : Promise<R>;

/** A model whose engine runs in a Web Worker. */
export type Pippin = {
  [K in keyof InPage]: K extends "chat"
    ? InPage[K]
    : InPage[K] extends (...args: infer A) => infer R
      ? (...args: A) => Crossed<R>
      : InPage[K];
};

/** Loads a model into a new Web Worker; the static methods are "pippin"'s. */
export declare const Pippin: {
  load(...args: Parameters<typeof InPage.load>): Promise<Pippin>;
  cached: typeof InPage.cached;
  evict: typeof InPage.evict;
  deleteCached: typeof InPage.deleteCached;
};

export default Pippin;
