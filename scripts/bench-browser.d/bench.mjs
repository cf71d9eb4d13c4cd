// Pippin's CPU backend (wasm SIMD128) side by side with wllama (llama.cpp in wasm) in
// Debian's headless Chromium: the same GGUF, the same prompt of exactly 128 tokens, 64
// greedy tokens; prefill and decode speed as each engine times itself, and the peak
// resident memory of the browser's processes. Run it through scripts/bench-browser.
//
//   node scripts/bench-browser.d/bench.mjs [--model PATH] [--json] [--prompt-tokens N]
//        [--max-tokens N] [--threads 1,2] [--engines pippin,pippin-worker,wllama] [--timeout S]
//        [--task text|copy] [--speculation auto,on,off] [--draft PATH]
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { tmpdir } from "node:os";
import { chromium } from "playwright-core";
import { HttpError, ISOLATED, localHost, resolveInside, sendError, sendFile } from "../lib/static.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const MODEL_ROUTE = "/bench/model.gguf";
const PAGE = "/scripts/bench-browser.d/page.html";
const FLAGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"];

// A fixed English text, longer than any prompt asked for; the prompt is its prefix of
// exactly --prompt-tokens tokens under the model's own tokenizer.
const TEXT = `The old lighthouse stood at the end of a narrow spit of land, where the road gave up
and the grass ran down to grey stones and the sea. For more than a century its keepers had
climbed the spiral stair each evening to light the lamp, wind the clockwork that turned the
great lens, and write a few lines in the logbook about the wind, the weather and the ships
that passed. The entries were short and plain: a schooner bound for the islands, fog from
the south at dawn, a broken pane replaced in the lantern room, the supply boat late again
because of the swell. When the light was finally automated, the last keeper packed the
logbooks into wooden crates and carried them to the village library, where they sat for years
in a back room that smelled of paper and salt. A schoolteacher found them one winter while
looking for something else entirely. She began to read them in the evenings, one volume at a
time, and soon noticed that the weather notes formed a record no one had ever studied: daily
observations of wind, rain, fog and sea state, written by the same few families over four
generations. With the help of her students she copied the numbers into a spreadsheet, checked
them against the records of the nearest harbour, and drew the first charts of how the storms
along that coast had changed. The work took three winters. When it was done, the charts were
pinned to the library wall beside a photograph of the lighthouse, and people came from the
university in the city to ask how a handful of children had found what their instruments had
missed.`.replace(/\s+/g, " ");
const COPY_CUE = "\n\nThe same passage again, word for word:\n\n";

/** The task's prompt from the fitted text (see --task). */
function taskPrompt(text) {
  return opt.task === "copy" ? `${text}${COPY_CUE}${text.split(" ").slice(0, 6).join(" ")}` : text;
}

const { values: opt } = parseArgs({
  options: {
    model: { type: "string", default: path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf") },
    json: { type: "boolean", default: false },
    "prompt-tokens": { type: "string", default: "128" },
    "max-tokens": { type: "string", default: "64" },
    threads: { type: "string", default: "1,2" },
    engines: { type: "string", default: "pippin,wllama" },
    timeout: { type: "string", default: "300" },
    task: { type: "string", default: "text" },
    speculation: { type: "string", default: "auto" },
    draft: { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (opt.help) {
  console.log(`usage: scripts/bench-browser [--model PATH] [--json] [--prompt-tokens N] [--max-tokens N]
                  [--threads 1,2] [--engines pippin,pippin-worker,wllama] [--timeout SECONDS]
                  [--task text|copy] [--speculation auto,on,off] [--draft PATH]
Runs Pippin's CPU backend (pippin: on the page; pippin-worker: through pippin/worker), then wllama, each with each --threads count (CPU only), one after the
other in a fresh headless Chromium each, on the same GGUF and prompt; prints prefill and
decode tokens/s and the peak resident memory of the browser's processes above their idle
baseline. --timeout bounds each run (load + generate), in seconds.
--task copy: the prompt is the text, then "${COPY_CUE}" and the text's first words, so
the reply copies the text (what speculative decoding's prompt lookup guesses well);
text (default): the text alone. --speculation: Pippin's runs with each setting.
--draft PATH: Pippin's runs load this GGUF (the model's vocabulary) as their draft model
(speculation off does not use it).`);
  process.exit(0);
}
const modelFile = path.resolve(opt.model);
const draftFile = opt.draft ? path.resolve(opt.draft) : null;
const DRAFT_ROUTE = "/bench/draft.gguf";
const PROMPT_TOKENS = int(opt["prompt-tokens"], "--prompt-tokens");
const MAX_TOKENS = int(opt["max-tokens"], "--max-tokens");
const RUN_TIMEOUT_MS = int(opt.timeout, "--timeout") * 1000;
const THREADS = opt.threads.split(",").map((t) => int(t, "--threads"));
const ENGINES = opt.engines.split(",").map((e) => e.trim());
const SPECULATION = opt.speculation.split(",").map((e) => e.trim());
for (const s of SPECULATION) if (!["auto", "on", "off"].includes(s)) die(`--speculation: "${s}" is not auto, on or off`);
if (!["text", "copy"].includes(opt.task)) die(`--task: "${opt.task}" is not text or copy`);
for (const e of ENGINES) if (!["pippin", "pippin-worker", "wllama"].includes(e)) die(`--engines: unknown engine "${e}" (pippin, pippin-worker, wllama)`);
if (!fs.statSync(modelFile, { throwIfNoEntry: false })?.isFile()) die(`no model file at ${modelFile} (scripts/fetch-model downloads the default one)`);
if (draftFile && !fs.statSync(draftFile, { throwIfNoEntry: false })?.isFile()) die(`no draft model file at ${draftFile}`);
if (!fs.existsSync(path.join(root, "pkg/index.js"))) die("pkg/ is missing: run scripts/build-pkg first");
const wllamaDir = path.join(here, "node_modules/@wllama/wllama/esm");
if (ENGINES.includes("wllama") && !fs.existsSync(path.join(wllamaDir, "wasm/wllama.wasm"))) die("wllama is missing: run npm ci --prefix scripts/bench-browser.d");

function int(s, name) {
  const n = Number(s);
  if (!Number.isInteger(n) || n <= 0) die(`${name}: expected a positive integer, got "${s}"`);
  return n;
}
function die(msg) {
  console.error(`bench-browser: ${msg}`);
  process.exit(2);
}
const log = (msg) => process.stderr.write(`bench-browser: ${msg}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** `p`, or a rejection naming `what` after `ms`. */
function bounded(p, ms, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: timed out after ${Math.round(ms / 1000)} s`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

// --- A static server for the repository, cross-origin isolated -------------------------
// Serves the repository root (pkg/, scripts/bench-browser.d/ and its node_modules) on
// 127.0.0.1 with COOP/COEP, so the page may use SharedArrayBuffer (wllama's threads),
// and the model, wherever it lies, at MODEL_ROUTE.
function serve() {
  const isolated = {
    ...ISOLATED,
    "cross-origin-resource-policy": "same-origin",
    "cache-control": "no-store",
  };
  const server = http.createServer((req, res) => {
    try {
      if (!localHost(req)) throw new HttpError(403, "forbidden: only requests to 127.0.0.1 or localhost");
      if (req.method !== "GET" && req.method !== "HEAD") throw new HttpError(405, "method not allowed");
      const url = String(req.url ?? "/").split("?")[0].split("#")[0];
      const file = url === MODEL_ROUTE ? modelFile : url === DRAFT_ROUTE && draftFile ? draftFile : resolveInside(root, url);
      sendFile(res, file, isolated);
    } catch (e) {
      sendError(res, e);
    }
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

// --- The browser's processes: resident memory and CPU time -----------------------------
// Chromium is started by this process (playwright spawns it), so its processes are all
// of this process's descendants.
const CLK_TCK = 100;
function procStat(pid) {
  const s = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
  return { ppid: Number(f[1]), cpuTicks: Number(f[11]) + Number(f[12]) };
}
function browserProcs() {
  const children = new Map();
  const stats = new Map();
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = procStat(d);
      stats.set(Number(d), st);
      if (!children.has(st.ppid)) children.set(st.ppid, []);
      children.get(st.ppid).push(Number(d));
    } catch {} // gone meanwhile
  }
  const out = [];
  const todo = [...(children.get(process.pid) ?? [])];
  while (todo.length) {
    const pid = todo.pop();
    out.push({ pid, ...stats.get(pid) });
    todo.push(...(children.get(pid) ?? []));
  }
  return out;
}
function rssKiB(pid) {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}
/** Busy CPU time (s) of the whole machine, all cores (/proc/stat: all but idle and iowait). */
function machineBusy() {
  const f = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = f;
  return (user + nice + system + irq + softirq + steal) / CLK_TCK;
}
/**
 * Sum of VmRSS (bytes) and of user+system CPU time (s) over the browser's processes,
 * and the machine's busy CPU time (s).
 */
function sample() {
  let rss = 0, cpu = 0;
  const procs = browserProcs();
  for (const p of procs) {
    rss += rssKiB(p.pid) * 1024;
    cpu += p.cpuTicks / CLK_TCK;
  }
  return { t: performance.now(), rss, cpu, busy: machineBusy(), procs: procs.length };
}

// --- One run in a fresh browser ------------------------------------------------------
async function inBrowser(base, label, fn) {
  // A persistent profile in a fresh folder: an incognito context's storage quota is
  // too small for wllama's copy of a multi-GB model (QuotaExceededError at ~2 GB).
  const profile = fs.mkdtempSync(path.join(tmpdir(), "pippin-bench-"));
  const launch = chromium.launchPersistentContext(profile, { executablePath: "/usr/bin/chromium", args: FLAGS, headless: true });
  const browser = await bounded(launch, 60_000, `${label}: starting Chromium`);
  const problems = [];
  try {
    const page = await browser.newPage();
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => m.type() === "error" && problems.push(`console: ${m.text()}`));
    page.on("crash", () => problems.push("the page crashed"));
    const marks = {};
    await page.exposeFunction("benchMark", (name) => {
      marks[name] = sample();
    });
    await bounded(page.goto(`${base}${PAGE}`), 30_000, `${label}: opening the page`);
    await bounded(page.waitForFunction(() => window.ready), 30_000, `${label}: the page's script`);
    return await fn(page, marks, problems);
  } catch (e) {
    if (problems.length) e.message += `\n  ${problems.slice(0, 5).join("\n  ")}`;
    throw e;
  } finally {
    await bounded(browser.close(), 30_000, `${label}: closing Chromium`).catch((e) => log(e.message));
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

/** Runs `call` in the page while sampling memory every ~100 ms; the peak above the idle baseline. */
async function measured(page, marks, label, call) {
  await sleep(1500); // let the fresh browser settle
  const idle = [];
  for (let i = 0; i < 5; i++) {
    idle.push(sample().rss);
    await sleep(100);
  }
  const baseline = idle.reduce((a, b) => a + b, 0) / idle.length;
  let peak = baseline, samples = 0;
  const timer = setInterval(() => {
    const s = sample();
    samples++;
    if (s.rss > peak) peak = s.rss;
  }, 100);
  try {
    const r = await bounded(page.evaluate(call.fn, call.arg), RUN_TIMEOUT_MS, `${label}: load and generate`);
    const end = sample();
    peak = Math.max(peak, end.rss);
    // Cores the browser kept busy while generating, and those other processes did.
    const g = marks.generate, e = marks.end;
    const secs = g && e && e.t > g.t ? (e.t - g.t) / 1000 : 0;
    const cpuBusy = secs ? (e.cpu - g.cpu) / secs : null;
    const otherBusy = secs ? Math.max(0, (e.busy - g.busy) - (e.cpu - g.cpu)) / secs : null;
    return {
      ...r,
      memory: { baselineBytes: baseline, peakBytes: peak, peakAboveIdleBytes: peak - baseline, samples, processes: end.procs },
      cpuCoresBusyWhileGenerating: cpuBusy,
      otherCpuCoresBusyWhileGenerating: otherBusy,
    };
  } finally {
    clearInterval(timer);
  }
}

const rate = (n, ms) => (ms > 0 ? (n * 1000) / ms : 0);
const MiB = 1 << 20;

async function main() {
  const server = await serve();
  const base = `http://127.0.0.1:${server.address().port}`;
  const results = [];
  let features = null, prompt = null;
  try {
    // Timings mean little on a machine that is busy with something else.
    const b0 = machineBusy();
    await sleep(1000);
    const busy = machineBusy() - b0;
    if (busy > 0.3) log(`warning: this machine is busy (${busy.toFixed(2)} cores used by other processes before the runs); speeds will be low and uneven`);
    // The prompt: the fixed text's prefix of exactly PROMPT_TOKENS tokens.
    log(`model ${path.relative(root, modelFile) || modelFile}; fitting the prompt to ${PROMPT_TOKENS} tokens`);
    const fit = await inBrowser(base, "prompt", async (page) => {
      features = await page.evaluate(() => window.features());
      return bounded(page.evaluate(([u, t, n]) => window.fitPrompt(u, t, n), [MODEL_ROUTE, TEXT, PROMPT_TOKENS]), 120_000, "prompt: tokenizing");
    });
    prompt = taskPrompt(fit.prompt);
    if (fit.tokens !== PROMPT_TOKENS) log(`warning: no prefix of the text is exactly ${PROMPT_TOKENS} tokens; using ${fit.tokens}`);
    log(`browser: ${features.userAgent.match(/Chrom\S+/)?.[0] ?? features.userAgent}; crossOriginIsolated=${features.crossOriginIsolated} JSPI=${features.jspi} memory64=${features.memory64} cores=${features.hardwareConcurrency}`);

    const runs = [];
    const pippin = (engine) => THREADS.flatMap((threads) => SPECULATION.map((speculation) => ({ engine, threads, speculation })));
    if (ENGINES.includes("pippin")) runs.push(...pippin("pippin-cpu"));
    // The same engine through `pippin/worker`: the lead thread is a worker (it sleeps
    // while the helpers finish a round) instead of the page (which must spin).
    if (ENGINES.includes("pippin-worker")) runs.push(...pippin("pippin-worker"));
    if (ENGINES.includes("wllama")) for (const t of THREADS) runs.push({ engine: "wllama", threads: t });
    for (const run of runs) {
      const label = `${run.engine} (${run.threads} thread${run.threads > 1 ? "s" : ""}${run.speculation ? `, speculation ${run.speculation}` : ""})`;
      log(`${label}: running`);
      const started = performance.now();
      try {
        const r = await inBrowser(base, label, async (page, marks) => {
          if (!(await page.evaluate(() => self.crossOriginIsolated))) throw new Error("the page is not cross-origin isolated");
          const entry = run.engine === "pippin-worker" ? "worker" : "index";
          const draft = draftFile && run.engine !== "wllama" ? DRAFT_ROUTE : undefined;
          const arg = { url: MODEL_ROUTE, prompt, maxTokens: MAX_TOKENS, threads: run.threads, entry, speculation: run.speculation, draft };
          return measured(page, marks, label, run.engine === "wllama"
            ? { fn: (a) => window.runWllama(a), arg }
            : { fn: (a) => window.runPippin(a), arg });
        });
        results.push(run.engine === "wllama" ? fromWllama(run, r) : fromPippin(run, r));
      } catch (e) {
        results.push({ ...run, error: String(e?.message ?? e) });
      }
      const last = results.at(-1);
      log(`${label}: ${last.error ? `FAILED: ${last.error}` : "done"} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
      if (last.otherCpuCoresBusyWhileGenerating > 0.2) log(`${label}: warning: other processes kept ${last.otherCpuCoresBusyWhileGenerating.toFixed(2)} cores busy while it generated; its speed is not reliable`);
    }
  } finally {
    server.close();
  }
  const report = {
    model: modelFile,
    draft: draftFile,
    promptTokensAsked: PROMPT_TOKENS,
    task: opt.task,
    prompt,
    maxTokens: MAX_TOKENS,
    browser: features,
    definitions: {
      prefillTokensPerS: "prompt tokens / the engine's prefill time (prompt run to the first token's logits)",
      decodeTokensPerS: "(generated tokens - 1) / the engine's decode time: the first token comes from the prefill (as Pippin's Usage::decode_tokens_per_s)",
      peakMemoryMB: "peak of the summed VmRSS of all Chromium processes during load + generate, minus their idle baseline just before, in MB of 2^20 bytes",
    },
    runs: results,
  };
  if (opt.json) console.log(JSON.stringify(report, null, 2));
  else printTable(report);
  process.exitCode = results.some((r) => r.error) ? 1 : 0;
}

function fromPippin(run, r) {
  const u = r.usage;
  return {
    ...run,
    backend: r.backend,
    threads: r.threads,
    threadsReason: r.threadsReason,
    multithread: r.multithread,
    promptTokens: u.promptTokens,
    generatedTokens: u.generatedTokens,
    finishReason: r.finishReason,
    prefillMs: u.prefillMs,
    decodeMs: u.decodeMs,
    prefillTokensPerS: rate(u.promptTokens, u.prefillMs),
    decodeTokensPerS: rate(Math.max(u.generatedTokens - 1, 0), u.decodeMs),
    timingSource: "usage (engine)",
    speculation: { setting: run.speculation, ...u.speculation },
    ...harness(r),
  };
}

/** What the harness measured around a run, whichever runtime ran it. */
function harness(r) {
  return {
    peakMemoryMB: r.memory.peakAboveIdleBytes / MiB,
    memory: r.memory,
    cpuCoresBusyWhileGenerating: r.cpuCoresBusyWhileGenerating,
    otherCpuCoresBusyWhileGenerating: r.otherCpuCoresBusyWhileGenerating,
    loadMs: r.loadMs,
    wallFirstTokenMs: r.wallFirstTokenMs,
    wallTotalMs: r.wallTotalMs,
    text: r.text,
  };
}

function fromWllama(run, r) {
  const t = r.timings;
  let promptTokens, generatedTokens, prefillMs, decodeMs, timingSource;
  if (t && t.prompt_n > 0) {
    // llama-server's timings: prompt_ms is the prompt's batch up to the first token,
    // predicted_ms runs from there to the last token, over predicted_n tokens of which
    // the first was sampled from the prompt's logits.
    [promptTokens, generatedTokens, prefillMs, decodeMs] = [t.prompt_n, t.predicted_n, t.prompt_ms, t.predicted_ms];
    timingSource = "timings (engine)";
  } else {
    promptTokens = r.usage?.prompt_tokens ?? null;
    generatedTokens = r.usage?.completion_tokens ?? r.chunks;
    prefillMs = r.wallFirstTokenMs;
    decodeMs = r.wallTotalMs - r.wallFirstTokenMs;
    timingSource = "wall clock (no timings reported)";
  }
  return {
    ...run,
    threads: r.threads,
    requestedThreads: r.requestedThreads,
    multithread: r.multithread,
    addBos: r.addBos,
    promptTokens,
    usagePromptTokens: r.usage?.prompt_tokens ?? null,
    generatedTokens,
    finishReason: r.finishReason,
    prefillMs,
    decodeMs,
    prefillTokensPerS: rate(promptTokens ?? 0, prefillMs),
    decodeTokensPerS: rate(Math.max(generatedTokens - 1, 0), decodeMs),
    timingSource,
    ...harness(r),
    logs: r.logs,
  };
}

function printTable(report) {
  const head = ["engine", "threads", "speculation", "prompt tok", "gen tok", "prefill tok/s", "decode tok/s", "peak MB"];
  const spec = (r) => (r.speculation ? `${r.speculation.setting} ${r.speculation.accepted}/${r.speculation.proposed}` : "-");
  const rows = report.runs.map((r) =>
    r.error
      ? [r.engine, String(r.threads), "-", "-", "-", "-", "-", "FAILED"]
      : [
          r.engine,
          r.engine === "wllama" ? `${r.threads}${r.multithread ? " (mt)" : ""}` : String(r.threads),
          spec(r),
          String(r.promptTokens),
          String(r.generatedTokens),
          r.prefillTokensPerS.toFixed(1),
          r.decodeTokensPerS.toFixed(1),
          r.peakMemoryMB.toFixed(0),
        ],
  );
  const width = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells) => cells.map((c, i) => (i === 0 ? c.padEnd(width[i]) : c.padStart(width[i]))).join("  ");
  const b = report.browser;
  console.log(`model: ${report.model}`);
  if (report.draft) console.log(`draft: ${report.draft}`);
  if (b) console.log(`browser: ${b.userAgent.match(/Chrom\S+/)?.[0] ?? "?"} headless; crossOriginIsolated ${b.crossOriginIsolated}, JSPI ${b.jspi}, memory64 ${b.memory64}, ${b.hardwareConcurrency} cores`);
  console.log(`prompt: ${report.promptTokensAsked} tokens asked, task ${report.task}; ${report.maxTokens} greedy tokens\n`);
  console.log(line(head));
  console.log(line(width.map((w) => "-".repeat(w))));
  for (const r of rows) console.log(line(r));
  console.log("");
  for (const r of report.runs) {
    const name = `${r.engine} ${r.threads}t${r.speculation ? ` ${r.speculation.setting}` : ""}`;
    if (r.error) {
      console.log(`${name}: FAILED: ${r.error}`);
      continue;
    }
    const notes = [
      `finish ${r.finishReason}`,
      `prefill ${r.prefillMs.toFixed(0)} ms, decode ${r.decodeMs.toFixed(0)} ms (${r.timingSource})`,
      `load ${(r.loadMs / 1000).toFixed(1)} s`,
      r.cpuCoresBusyWhileGenerating != null ? `${r.cpuCoresBusyWhileGenerating.toFixed(2)} cores busy while generating` : null,
      r.otherCpuCoresBusyWhileGenerating > 0.2 ? `WARNING: other processes kept ${r.otherCpuCoresBusyWhileGenerating.toFixed(2)} cores busy meanwhile` : null,
      r.engine === "wllama" ? `multi-thread ${r.multithread ? "yes" : "no"}` : null,
      r.engine === "wllama" && r.usagePromptTokens != null && r.usagePromptTokens !== r.promptTokens ? `usage.prompt_tokens ${r.usagePromptTokens}` : null,
    ].filter(Boolean);
    console.log(`${name}: ${notes.join("; ")}`);
  }
  console.log(`\ndecode tok/s = (generated - 1) / decode time: the first token comes from the prefill (Pippin's Usage::decode_tokens_per_s).`);
  console.log(`peak MB: summed VmRSS of all Chromium processes, peak during load + generate minus the idle baseline (MB = 2^20 bytes).`);
}

main().catch((e) => {
  console.error(`bench-browser: ${e?.stack ?? e}`);
  process.exit(1);
});
