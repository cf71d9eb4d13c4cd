// Where a model's bytes come from: a URL (Cache Storage first, downloads that resume
// with HTTP Range, the storage left checked), a File or Blob, or the files of a split
// model; an adapter's files. index.js loads what these open.

import { PippinError, asPippinError, loadAborted } from "./errors.js";

export const CACHE = "pippin-models";

export const SIZE_HEADER = "x-pippin-bytes";
/** Most files of a split model loaded by URL: an HTTP/1.1 host gives a page 6
 * connections, one is left for the CPU threads' scripts and whatever else the page
 * fetches. */
const MAX_URL_FILES = 5;

/** Cache Storage, when this page has it (not on http: origins other than localhost). */
async function openCache() {
  try {
    return globalThis.caches ? await caches.open(CACHE) : null;
  } catch {
    return null;
  }
}

/** fetch(url), or a PippinError ("Download", or "Aborted" when `signal` fired). */
export async function download(url, what, signal) {
  let response;
  try {
    response = await fetch(url, { signal });
  } catch (e) {
    if (signal?.aborted) throw loadAborted(signal);
    throw new PippinError("Download", `Downloading ${what} from ${url} failed: ${e.message}`, { cause: e });
  }
  if (!response.ok) {
    throw new PippinError("Download", `Downloading ${what} from ${url} failed: HTTP ${response.status} ${response.statusText}`);
  }
  if (!response.body) throw new PippinError("Download", `Downloading ${what} from ${url} failed: the response has no body.`);
  return response;
}

/** `stream`, erroring as soon as `signal` fires (the engine's read then fails), or
 * when the pipe cannot start (a body already read). */
export function abortable(stream, signal) {
  if (!signal) return stream;
  const through = new TransformStream();
  stream.pipeTo(through.writable, { signal }).catch((e) => through.writable.abort(e).catch(() => {}));
  return through.readable;
}

/**
 * The URLs of every file of a split model (llama.cpp's gguf-split names) when `url`
 * names its first, `…-00001-of-000NN.gguf` (as `shard_names` in src/gguf/split.rs);
 * null otherwise. The query string, if any, is kept on each.
 */
export function shardUrls(url) {
  const m = /^(.*)-00001-of-(\d{5})\.gguf((?:[?#].*)?)$/.exec(String(url));
  const n = m ? Number(m[2]) : 0;
  if (!n) return null;
  return Array.from({ length: n }, (_, k) => `${m[1]}-${String(k + 1).padStart(5, "0")}-of-${m[2]}.gguf${m[3]}`);
}

/**
 * The model's files: one source, an array of a split model's files in order, or the URL
 * of a split's first file (the others are found by name). Each file is opened as
 * `openFile` does (from Cache Storage or downloaded, each cached under its own URL);
 * `done(ok)` commits or discards them all.
 */

export async function openSource(source, options) {
  const named = typeof source === "string" || source instanceof URL ? shardUrls(source) : null;
  if (!Array.isArray(source) && !named) return openFile(source, options);
  const list = named ?? source;
  if (list.length === 0) throw new PippinError("BadOptions", "Pippin.load was given an empty list of model files.");
  // Every file's download is open at once (the headers are read first). An HTTP/1.1
  // server gives a page 6 connections per host: a 7th request would wait for ever.
  const urls = list.filter((f) => typeof f === "string" || f instanceof URL).length;
  if (urls > MAX_URL_FILES) {
    throw new PippinError(
      "BadOptions",
      `This model is split into ${list.length} files; at most ${MAX_URL_FILES} can be downloaded at once from one server. ` +
        "Merge them (llama-gguf-split --merge) or split the model into fewer, larger files, or pass the files as Blobs.",
    );
  }
  const files = [];
  // The storage left is shared by the files: each is checked against what the ones
  // before it will take.
  const planned = { bytes: 0 };
  try {
    for (const f of list) files.push(await openFile(f, { ...options, planned }));
  } catch (e) {
    await Promise.all(files.map((f) => f.done(false).catch(() => {})));
    throw e;
  }
  const totals = files.map((f) => f.total);
  return {
    stream: files.map((f) => f.stream),
    total: totals.every((t) => t) ? totals.reduce((a, b) => a + b, 0) : undefined,
    totals,
    fromCache: files.every((f) => f.fromCache),
    get cacheError() {
      return files.find((f) => f.cacheError)?.cacheError;
    },
    done: async (ok) => {
      await Promise.all(files.map((f) => f.done(ok)));
    },
  };
}

/**
 * The model's bytes for the engine. A URL comes from Cache Storage when a complete copy
 * is there; a download is written to the cache as the engine reads it (one read of the
 * network stream, paced by the engine: nothing is buffered beyond a chunk), and the
 * entry is committed only when the model loaded: `done(ok)` commits or discards it.
 */
async function openFile(source, options) {
  if (typeof source === "string" || source instanceof URL) {
    const url = String(source);
    const cache = options.cache !== false ? await openCache() : null;
    const hit = cache ? await cache.match(url) : undefined;
    if (hit?.body && hit.headers.has(SIZE_HEADER)) {
      const total = Number(hit.headers.get(SIZE_HEADER));
      return { stream: hit.body, total, fromCache: true, done: async (ok) => ok || (await cache.delete(url)) };
    }
    if (hit) await cache.delete(url); // stored without its size: not trusted
    const response = await download(url, "the model", options.signal);
    const total = Number(response.headers.get("content-length")) || undefined;
    const body = total ? resumable(url, response, total, options.signal) : response.body;
    // Without a size the copy could not be checked whole later: it is not kept.
    if (!cache || !total) return { stream: body, total, done: async () => {} };
    const left = await storageLeft();
    const before = options.planned?.bytes ?? 0;
    if (left !== undefined && before + total > left) {
      return { stream: body, total, done: async () => {}, cacheError: storageError(url, total, Math.max(0, left - before)) };
    }
    if (options.planned) options.planned.bytes += total;
    return cachingStream(cache, url, body, total);
  }
  if (source instanceof Response) {
    if (!source.body) throw new PippinError("BadOptions", "The model Response has no body.");
    const total = Number(source.headers.get("content-length")) || undefined;
    return { stream: source.body, total, done: async () => {} };
  }
  if (source instanceof Blob) return { stream: source.stream(), total: source.size, done: async () => {} };
  if (source instanceof ArrayBuffer) source = new Uint8Array(source);
  if (ArrayBuffer.isView(source)) {
    const blob = new Blob([source]);
    return { stream: blob.stream(), total: blob.size, done: async () => {} };
  }
  throw new PippinError("BadOptions", "Pippin.load takes a URL, a Response, a Blob or File, or a Uint8Array (or an array of them: a split model's files).");
}

/**
 * A stream of `response` that also writes each chunk to Cache Storage under `url`,
 * committed by `done(true)` once all `total` bytes are through (the entry records its
 * size, so a later hit is used only whole); `done(false)` aborts and evicts it.
 */
function cachingStream(cache, url, body, total) {
  const reader = body.getReader();
  const { readable, writable } = new TransformStream();
  const writer = writable.getWriter();
  let bytes = 0;
  const headers = { "content-type": "application/octet-stream", [SIZE_HEADER]: String(total) };
  const stored = cache.put(url, new Response(readable, { headers })).then(
    () => true,
    () => false,
  );
  // A failed cache write (a full disk, storage pressure) only loses the copy: the
  // model keeps streaming to the engine.
  let caching = true;
  const failed = stored.then((ok) => ok || (caching = false));
  const pump = async () => {
    const { value, done } = await reader.read();
    if (!done) {
      bytes += value.byteLength;
      if (caching) await Promise.race([writer.write(value).catch(() => (caching = false)), failed]);
    }
    return { value, done };
  };
  const stream = new ReadableStream({
    async pull(controller) {
      const { value, done } = await pump();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel: (why) => reader.cancel(why),
  });
  const file = { stream, total };
  file.done = async (ok) => {
    if (ok) {
      // The engine may stop before the file's end: the cache gets the rest too.
      try {
        for (;;) if (!caching || (await pump()).done) break;
      } catch (e) {
        file.cacheError = new PippinError(
          "Download",
          `The model loaded, but the rest of ${url} could not be downloaded to keep it in Cache Storage: ${e?.message ?? e}`,
        );
        caching = false;
      }
      if (caching && bytes === total) {
        const closed = await writer.close().then(() => true, () => false);
        if (closed && (await stored)) return;
      }
      // The model loaded, its copy did not: storage said no (quota, a full disk).
      file.cacheError ??= storageError(url, total, await storageLeft());
    }
    // The copy is lost, never the load: nothing here may throw.
    await writer.abort(new Error("the model did not load")).catch(() => {});
    await reader.cancel().catch(() => {});
    await stored;
    await cache.delete(url).catch(() => {});
  };
  return file;
}

/** Bytes of storage this origin has left (navigator.storage.estimate()), if it says. */
async function storageLeft() {
  try {
    const e = await globalThis.navigator?.storage?.estimate?.();
    return e && Number.isFinite(e.quota) ? Math.max(0, e.quota - (e.usage ?? 0)) : undefined;
  } catch {
    return undefined;
  }
}

/** Why a model that loaded is not kept in Cache Storage. */
function storageError(url, total, left) {
  const mb = (n) => `${Math.ceil(n / 1e6)} MB`;
  const room = left === undefined ? "this browser did not say how much storage is left" : `${mb(left)} of storage are left to this site`;
  return new PippinError(
    "Storage",
    `The model loaded, but ${url} (${mb(total)}) could not be kept in Cache Storage: ${room} ` +
      "(navigator.storage.estimate()). It will be downloaded again next time; free space with Pippin.evict(url).",
  );
}

/**
 * `response`'s body, resumed where it broke off: a download that fails midway (a
 * dropped connection) is asked for again from the byte it reached, with `Range` and
 * `If-Range` on the file's ETag or Last-Modified, up to 3 tries (0.5, 2, 5 s apart)
 * without progress. Only the same file is ever spliced: a 206 must cover the rest of
 * a file of the same size, a 200 (a server that ignores Range, or the file changed)
 * must carry the same validator, and then the bytes already read are skipped. A file
 * without a validator (or whose headers a cross-origin server does not expose) is not
 * resumed: the break is a Download error, as before.
 */
function resumable(url, response, total, signal) {
  let reader = response.body.getReader();
  let got = 0;
  let breaks = 0; // in a row, without a byte between them
  const validator = response.headers.get("etag") ?? response.headers.get("last-modified");
  const same = (r) => (r.headers.get("etag") ?? r.headers.get("last-modified")) === validator;
  const reopen = async (cause) => {
    for (const wait of [500, 2000, 5000]) {
      await new Promise((resolve) => setTimeout(resolve, wait));
      if (signal?.aborted) break;
      const headers = { range: `bytes=${got}-`, "if-range": validator };
      // no-store: the browser's HTTP cache must not answer (or resume) it itself.
      const r = await fetch(url, { headers, signal, cache: "no-store" }).catch(() => null);
      if (!r) continue;
      const range = r.headers.get("content-range");
      if (r.status === 206 && r.body && range === `bytes ${got}-${total - 1}/${total}`) return r.body.getReader();
      if (r.status === 200 && r.body && same(r) && Number(r.headers.get("content-length")) === total) return skipping(r.body.getReader(), got);
      await r.body?.cancel().catch(() => {});
      break; // an answer that cannot continue this file: trying again will not help
    }
    throw cause;
  };
  return new ReadableStream({
    async pull(controller) {
      try {
        const { value, done } = await reader.read();
        if (done && got < total) throw new Error(`the download ended at byte ${got} of ${total}`);
        if (done) return controller.close();
        got += value.byteLength;
        breaks = 0;
        controller.enqueue(value);
      } catch (e) {
        // Every byte is in (the connection closed uncleanly after them): done.
        if (got >= total) return controller.close();
        if (signal?.aborted || !validator || ++breaks > 3) throw e;
        reader = await reopen(e);
        return this.pull(controller);
      }
    },
    cancel: (why) => reader.cancel(why),
  });
}

/** `reader`, its first `n` bytes dropped. */
function skipping(reader, n) {
  return {
    async read() {
      for (;;) {
        const r = await reader.read();
        if (r.done || n === 0) return r;
        if (r.value.byteLength <= n) {
          n -= r.value.byteLength;
          continue;
        }
        const value = r.value.subarray(n);
        n = 0;
        return { value, done: false };
      }
    },
    cancel: (why) => reader.cancel(why),
  };
}

export function inFolder(folder, file) {
  const base = new URL(String(folder).replace(/\/?$/, "/"), globalThis.location?.href);
  return new URL(file, base);
}

export async function adapterBytes(src, onProgress, what) {
  if (src && typeof src === "object" && !(src instanceof URL) && !(src instanceof Blob) && !(src instanceof Response) && !ArrayBuffer.isView(src) && !(src instanceof ArrayBuffer)) {
    return new TextEncoder().encode(JSON.stringify(src));
  }
  if (typeof src === "string" || src instanceof URL) {
    src = await download(src, `the adapter's ${what}`);
  }
  let bytes;
  try {
    bytes = new Uint8Array(src instanceof Response || src instanceof Blob ? await src.arrayBuffer() : ArrayBuffer.isView(src) ? src.buffer.slice(src.byteOffset, src.byteOffset + src.byteLength) : src);
  } catch (e) {
    throw asPippinError(e, "Download");
  }
  onProgress?.({ phase: what, loaded: bytes.length, total: bytes.length, fraction: 1 });
  return bytes;
}

