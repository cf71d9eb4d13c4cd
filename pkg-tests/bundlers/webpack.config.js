// webpack 5, as an app would configure it: nothing for Pippin (it emits the worker and
// the wasm from their new URL(..., import.meta.url) references).
import path from "node:path";

export default {
  mode: "production",
  entry: "./app/main.js",
  output: { path: path.resolve(import.meta.dirname, "dist/webpack"), filename: "main.js", clean: true },
  performance: { hints: false },
};
