// A helper of the CPU backend (see team.js): its own wasm instance holding a slice of
// every large matrix's rows. It takes its slices by message while the model loads,
// then blocks in Atomics.wait for rounds until the lead stops it.
import init, { Helper } from "./pippin_wasm.js";
import { GEN, DONE, KIND, ID, COUNT, COLS, FAILED, MATMUL, ROWS, STOP, EXIT, ERROR_AT, ERROR_BYTES, DATA_AT } from "./team.js";

let helper, ctrl, data, words, sab, index, helpers;
/** Where each matrix's rows go: { first, slot, rows, cols } by id. */
const slices = new Map();
let failed = null;

function matmul(id) {
  const [t, cols] = [ctrl[COUNT], ctrl[COLS]];
  const s = slices.get(id);
  const y = helper.matmul(id, data.subarray(0, t * cols));
  data.set(y, t * cols + t * s.slot);
}

function rows(id) {
  const n = ctrl[COUNT];
  const s = slices.get(id);
  const wanted = words.subarray(0, n);
  const got = helper.rows(id, wanted);
  let at = 0;
  for (let i = 0; i < n; i++) {
    if (wanted[i] >= s.first && wanted[i] < s.first + s.rows) {
      data.set(got.subarray(at, at + s.cols), n + i * s.cols);
      at += s.cols;
    }
  }
}

/** Says why this round failed, for the lead (the first failure's message wins). */
function fail(err) {
  if (Atomics.compareExchange(ctrl, FAILED, 0, index) !== 0) return;
  const text = new TextEncoder().encode(String(err?.message ?? err)).subarray(0, ERROR_BYTES);
  new Uint8Array(sab, ERROR_AT, ERROR_BYTES).set(text);
}

// A helper sleeps between rounds, never spins: with the cores busy elsewhere a spinning
// helper takes the time the lead needs (Chromium, default model, 2 cores under a load
// of 4: 2 threads decoded 2.5 tok/s spinning 2 ms, 7.9 spinning 0.1 ms, 14.4 sleeping;
// idle, spinning gained ~30%).
//
// A wake-up is only a hint, never a round: the lead bumps GEN and then notifies, so a
// helper that saw the new GEN at once, served the round and went back to sleep can be
// woken by that round's late notify (the lead descheduled between the two; Firefox,
// pippin/worker, 2 cores). Serving the round again would count it done twice, and the
// lead would read the next round's outputs before they were written.
function serve(seen) {
  for (;;) {
    Atomics.wait(ctrl, GEN, seen);
    const gen = Atomics.load(ctrl, GEN);
    if (gen === seen) continue;
    seen = gen;
    const kind = Atomics.load(ctrl, KIND);
    if (kind === STOP) return close();
    if (kind === EXIT) {
      if (ctrl[ID] !== index) continue;
      Atomics.add(ctrl, DONE, 1); // read (team.js waits for this), then never answers again
      return;
    }
    try {
      if (kind === MATMUL) matmul(ctrl[ID]);
      else if (kind === ROWS) rows(ctrl[ID]);
    } catch (err) {
      fail(err);
    }
    if (Atomics.add(ctrl, DONE, 1) + 1 === helpers) Atomics.notify(ctrl, DONE);
  }
}

onmessage = async (e) => {
  const m = e.data;
  try {
    if (m.init) {
      ({ sab, index, helpers } = m.init);
      ctrl = new Int32Array(sab, 0, 16);
      data = new Float32Array(sab, DATA_AT);
      words = new Uint32Array(sab, DATA_AT);
      await init(m.init.wasmUrl ? { module_or_path: m.init.wasmUrl } : undefined);
      helper = new Helper();
      postMessage({ ready: true });
    } else if (m.give) {
      const g = m.give;
      if (failed) return;
      const n = helper.add(g.id, g.ty, g.first, g.slot, g.cols, g.bytes);
      slices.set(g.id, { first: g.first, slot: g.slot, rows: n, cols: g.cols });
    } else if (m.run) {
      if (failed) throw failed;
      // Read before answering: the lead's first round comes after the answer.
      const seen = Atomics.load(ctrl, GEN);
      postMessage({ running: true });
      serve(seen);
    }
  } catch (err) {
    // A slice that did not fit (out of memory) fails the load at `run`.
    failed ??= err;
    if (m.init || m.run) postMessage({ error: String(err?.message ?? err) });
  }
};
