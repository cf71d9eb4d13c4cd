// The playground: a chat over Pippin running in a Web Worker (pippin/worker), so the
// page stays responsive while the model loads and generates. Each conversation is a
// session (conversations.js): several on one model, cloned, kept across reloads.
import { Pippin } from "pippin/worker";
import { escape, renderMarkdown } from "./markdown.js";
import { bytesOf, conversation, forget, save, savedFor } from "./conversations.js";

const $ = (id) => document.getElementById(id);
const state = {
  llm: null,
  model: null,
  conversations: [],
  current: null,
  ctl: null,
  busy: false,
  /** The current conversation's turns (its system prompt left out). */
  get messages() {
    return (this.current?.session?.messages ?? []).filter((m) => m.role !== "system");
  },
};

function banner(html, kind = "info") {
  const b = $("banner");
  b.className = `banner ${kind}`;
  b.innerHTML = html;
  b.hidden = !html;
}

function setStatus(text) {
  $("status").textContent = text;
}

function mb(bytes) {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/** The error as HTML for the banner (its text escaped), with what to do about it. */
function friendly(err) {
  const m = escape(err.message || String(err));
  switch (err?.code) {
    case "DeviceLimits":
      return `This model is too large for this device's GPU: ${m}`;
    case "Download":
      return `${m}. Check the URL and your connection.`;
    case "DeviceLost":
      return `${m} <button onclick="location.reload()">Reload the page</button>`;
    case "InvalidModel":
    case "Unsupported":
      return `This file cannot be loaded: ${m}`;
    default:
      return m;
  }
}

function enableChat(on) {
  for (const id of ["input", "send", "new-chat", "clone-chat"]) $(id).disabled = !on;
}

async function refreshCache() {
  const list = await Pippin.cached();
  const total = list.reduce((a, c) => a + c.bytes, 0);
  $("cached").textContent = list.length ? `Cache: ${list.length} model(s), ${mb(total)}` : "Cache: empty";
}

/** Without WebGPU the model runs on the CPU backend: say so, and how to get the GPU. */
async function checkWebGPU() {
  const adapter = await navigator.gpu?.requestAdapter().catch(() => null);
  if (!adapter) {
    banner(
      "<strong>WebGPU is not available in this browser</strong>, so Pippin runs on the CPU (fine for small models). " +
        "For the GPU use Chrome or Edge 113+ (on Linux start it with <code>--enable-unsafe-webgpu</code>), " +
        "Safari 26+, or Firefox 141+ on Windows.",
      "info",
    );
  }
}

async function loadModel() {
  const file = $("model-file").files[0];
  const source = file ?? new URL($("model-url").value, location.href).href;
  $("load").disabled = true;
  enableChat(false);
  banner("");
  if (state.llm) {
    await state.llm.dispose();
    state.llm = null;
    state.conversations = [];
    state.current = null;
  }
  setStatus("Loading…");
  const t0 = performance.now();
  try {
    state.llm = await Pippin.load(source, {
      backend: $("backend").value,
      kvCache: $("kv").value,
      onProgress: (p) => {
        // The model loaded but is not kept for next time (storage): say so, and why.
        if (p.cacheError) banner(escape(p.cacheError.message), "info");
        $("progress").value = p.fraction;
        const what = { download: "Connecting", upload: "Downloading and loading", compile: "Compiling the GPU kernels", ready: "Ready" }[p.phase] ?? p.phase;
        $("progress-text").textContent = p.total
          ? `${what}: ${mb(p.loaded)} of ${mb(p.total)} (${Math.round(p.fraction * 100)}%)`
          : `${what}: ${mb(p.loaded)}`;
      },
    });
    const info = await state.llm.info();
    $("gpu-info").textContent = JSON.stringify(info, null, 1);
    state.backend = info.backend;
    const where = info.backend === "cpu" ? "CPU" : `WebGPU (${info.gpuAdapter || "adapter"})`;
    $("n-backend").textContent = `${where}: ${info.backendReason}`;
    // The CPU backend's threads (served cross-origin isolated: serve.mjs), and why.
    const threads = info.backend === "cpu" ? `${info.threads} thread${info.threads > 1 ? "s" : ""}` : "";
    $("n-backend").title = info.threadsReason;
    setStatus(`${info.config.arch}, ${info.config.nLayers} layers · ${where}${threads ? ` (${threads})` : ""} · loaded in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    state.model = file ? file.name : source;
    await listSaved();
    await newChat();
    enableChat(true);
    await updateNumbers();
  } catch (e) {
    setStatus("No model loaded");
    banner(friendly(e), "error");
  } finally {
    $("load").disabled = false;
    refreshCache();
  }
}

async function updateNumbers(ttft) {
  if (!state.llm) return;
  const s = await state.llm.stats();
  $("n-prefill").textContent = s.prefillTokensPerS ? `${s.prefillTokensPerS.toFixed(1)} tok/s` : "–";
  $("n-decode").textContent = s.decodeTokensPerS ? `${s.decodeTokensPerS.toFixed(1)} tok/s` : "–";
  if (ttft !== undefined) $("n-ttft").textContent = `${ttft.toFixed(0)} ms`;
  const g = s.gpuBytes;
  $("n-memory").textContent =
    state.backend === "cpu"
      ? `none: the CPU backend keeps the weights (${mb(s.weightBytes)}) and KV cache (${mb(s.kvCacheBytes)}) in the wasm heap`
      : `${mb(g.weights + g.kvCache + g.scratch + g.adapters)} (weights ${mb(g.weights)}, KV ${mb(g.kvCache)}, scratch ${mb(g.scratch)}, adapters ${mb(g.adapters)})`;
  $("n-wasm").textContent = `${mb(s.wasmHeapBytes)} (peak ${mb(s.wasmHeapPeakBytes)}, memory ${mb(s.wasmMemoryBytes)})`;
  $("n-context").textContent = `${s.contextTokens} tokens`;
  const p = s.prefixCache;
  $("n-prefix").textContent = `${p.entries} kept (${mb(p.bytes)} of ${mb(p.budget)}), ${p.restoredTokens} tokens restored`;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  div.innerHTML = role === "assistant" ? renderMarkdown(text) : "";
  if (role === "user") div.textContent = text;
  $("messages").querySelector(".hint")?.remove();
  $("messages").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

/** The current conversation's messages on the page. */
function showMessages() {
  $("messages").innerHTML = '<p class="hint">Say hello.</p>';
  for (const m of state.messages) addMessage(m.role === "assistant" ? "assistant" : "user", typeof m.content === "string" ? m.content : "");
}

/** The conversation list: the current one marked, each switched to by a click. */
function showConversations() {
  const ul = $("conversations");
  ul.innerHTML = "";
  for (const c of state.conversations) {
    const li = document.createElement("li");
    li.className = c === state.current ? "current" : "";
    const open = Object.assign(document.createElement("button"), { className: "link", textContent: c.title });
    open.title = c.session ? "" : "saved: restored from its KV state when opened";
    open.onclick = serially(() => switchTo(c));
    const drop = Object.assign(document.createElement("button"), { className: "link", textContent: "×", title: "Delete" });
    drop.onclick = serially(() => dropConversation(c));
    li.append(open, c.session ? "" : " (saved)", drop);
    ul.append(li);
  }
}

async function begin(c) {
  state.conversations.unshift(c);
  state.current = c;
  showConversations();
  showMessages();
}

async function newChat() {
  if (!state.llm) return;
  const system = $("system").value.trim() || undefined;
  await begin(conversation(state.model, await state.llm.createSession({ system, overflow: "drop-oldest" })));
}

/** A copy of the current conversation that goes on apart from it. */
async function cloneChat() {
  const from = state.current;
  if (!from?.session) return;
  await begin(conversation(state.model, await from.session.clone(), `${from.title} (copy)`));
}

/** Opens `c`; a saved one is restored from its bytes. One saved with another model or
 * KV cache format is refused: it stays listed (loaded as it was saved, it opens). */
async function switchTo(c) {
  if (c === state.current) return;
  try {
    c.session ??= await state.llm.restoreSession(await bytesOf(c.id));
  } catch (e) {
    return banner(`This saved conversation cannot continue here: ${escape(e.message)}`, "error");
  }
  state.current = c;
  showConversations();
  showMessages();
}

async function dropConversation(c) {
  c.session?.destroy();
  state.conversations = state.conversations.filter((x) => x !== c);
  if (state.current === c) {
    state.current = null;
    const next = state.conversations.find((x) => x.session);
    await (next ? switchTo(next) : newChat());
  }
  showConversations();
  await forget(c.id);
}

/** The saved conversations of this model, listed (restored when opened). */
async function listSaved() {
  const saved = await savedFor(state.model).catch(() => []);
  state.conversations = saved.map((r) => Object.assign(conversation(r.model, null, r.title), { id: r.id }));
}

/** The structured-output box's schema, or null when it is empty (a bad one throws). */
function schemaOption() {
  const text = $("schema").value.trim();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`The structured-output schema is not valid JSON: ${err.message}`);
  }
}

/** A guided reply shown pretty-printed, with whether it parsed (its shape is guaranteed by the grammar). */
function showStructured(div, text, finishReason) {
  const pre = document.createElement("pre");
  pre.className = "structured";
  let verdict;
  try {
    pre.textContent = JSON.stringify(JSON.parse(text), null, 2);
    verdict = "✓ valid JSON, matching the schema (guided generation)";
  } catch {
    pre.textContent = text;
    verdict = finishReason === "length" ? "✗ cut short by max tokens" : "✗ not JSON";
  }
  const note = document.createElement("div");
  note.className = "structured-verdict";
  note.textContent = verdict;
  div.replaceChildren(pre, note);
}

/** Messages and conversation changes (new, clone, switch, delete) one after another:
 * a click during a reply takes effect when it ends (Stop ends it now). */
let queue = Promise.resolve();
function serially(f) {
  return (...args) => (queue = queue.then(() => f(...args)).catch((e) => banner(friendly(e), "error")));
}

async function send(text) {
  if (!text || !state.llm || state.busy) return;
  let schema;
  try {
    schema = schemaOption();
  } catch (err) {
    return banner(escape(err.message), "error");
  }
  const c = state.current;
  addMessage("user", text);
  const div = addMessage("assistant", "");
  state.busy = true;
  state.ctl = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  let reply = "";
  let ttft;
  const t0 = performance.now();
  try {
    const opts = {
      temperature: Number($("temperature").value),
      topK: Number($("top-k").value),
      topP: Number($("top-p").value),
      maxTokens: Number($("max-tokens").value),
      signal: state.ctl.signal,
    };
    if (schema) opts.responseFormat = { type: "json_schema", schema };
    for await (const chunk of c.session.promptStreaming(text, opts)) {
      if (chunk.done) {
        const u = chunk.usage;
        const meta = document.createElement("div");
        meta.className = "meta";
        const stopped = chunk.finishReason === "abort" ? " (stopped: not kept in the conversation)" : "";
        meta.textContent = `${u.generatedTokens} tokens · ${chunk.finishReason}${stopped} · ${u.cachedTokens} of ${u.promptTokens} prompt tokens cached`;
        if (schema) showStructured(div, reply, chunk.finishReason);
        div.append(meta);
        break;
      }
      ttft ??= performance.now() - t0;
      reply += chunk.text;
      div.innerHTML = renderMarkdown(reply);
      div.scrollIntoView({ block: "end" });
      updateNumbers(ttft);
    }
    // Kept for a reload: the transcript and its KV state.
    await save(c).catch((err) => banner(`The conversation is not saved: ${escape(err.message)}`, "info"));
    showConversations();
  } catch (err) {
    banner(friendly(err), "error");
  } finally {
    state.busy = false;
    $("send").disabled = false;
    $("stop").disabled = true;
    updateNumbers(ttft);
  }
}

async function refreshAdapters() {
  const ul = $("adapters");
  ul.innerHTML = "";
  const list = await state.llm.adapters();
  const none = { name: null, bytes: 0, rank: 0, active: !list.some((a) => a.active) };
  for (const a of [none, ...list]) {
    const li = document.createElement("li");
    const radio = Object.assign(document.createElement("input"), { type: "radio", name: "active-adapter", checked: a.active });
    radio.dataset.adapter = a.name ?? "";
    radio.onchange = async () => {
      await state.llm.useAdapter(a.name);
      refreshAdapters();
    };
    const label = document.createElement("span");
    label.textContent = a.name ? `${a.name} (rank ${a.rank}, ${mb(a.bytes)})` : "none (base model)";
    li.append(radio, label);
    if (a.name) {
      const unload = Object.assign(document.createElement("button"), { className: "link", textContent: "unload" });
      unload.onclick = async () => {
        await state.llm.unloadAdapter(a.name);
        refreshAdapters();
      };
      li.append(unload);
    }
    ul.append(li);
  }
}

async function loadAdapter() {
  if (!state.llm) return banner("Load a model first.", "info");
  const url = $("adapter-url").value.trim();
  const name = $("adapter-name").value.trim() || "adapter";
  if (!url) return;
  $("load-adapter").disabled = true;
  try {
    await state.llm.loadAdapter(name, new URL(url, location.href).href);
    await state.llm.useAdapter(name);
    banner("");
  } catch (e) {
    banner(friendly(e), "error");
  } finally {
    $("load-adapter").disabled = false;
    refreshAdapters();
  }
}

// A load replaces the model: a reply running stops, then the load waits its turn.
const loadSerially = serially(loadModel);
$("load").onclick = () => {
  state.ctl?.abort();
  loadSerially();
};
$("model-preset").onchange = () => {
  const url = $("model-preset").value;
  $("model-url").value = url;
  if (!url) $("model-url").focus();
};
/** The message as typed now, sent once what is queued before it is done. */
const sendSerially = serially(send);
function submit(e) {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || !state.llm) return;
  try {
    schemaOption();
  } catch (err) {
    // The message stays in the box until the schema is fixed.
    return banner(escape(err.message), "error");
  }
  $("input").value = "";
  sendSerially(text);
}
$("composer").onsubmit = submit;
$("input").onkeydown = (e) => e.key === "Enter" && !e.shiftKey && submit(e);
$("stop").onclick = () => state.ctl?.abort();
$("new-chat").onclick = serially(newChat);
$("clone-chat").onclick = serially(cloneChat);
// A fixed schema clears the error it caused.
$("schema").oninput = () => $("banner").classList.contains("error") && banner("");
$("load-adapter").onclick = loadAdapter;
$("delete-cache").onclick = async () => {
  for (const c of await Pippin.cached()) await Pippin.evict(c.url);
  refreshCache();
};

window.playground = state;
await checkWebGPU();
refreshCache();
document.body.dataset.ready = "true";
