// The package's TypeScript types (js/*.d.ts, which `scripts/build-pkg` copies into the
// package as they are) checked by the TypeScript compiler against an app's use of them
// (types/use.ts): the worker's types are derived from index.d.ts, proven here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");

test("the package's .d.ts files type-check an app's use of pippin, pippin/worker and pippin/prompt-api", () => {
  let out = "";
  try {
    out = execFileSync(process.execPath, [tsc, "-p", join(here, "types")], { encoding: "utf8" });
  } catch (e) {
    assert.fail(`tsc found errors:\n${e.stdout}${e.stderr}`);
  }
  assert.equal(out.trim(), "");
});
