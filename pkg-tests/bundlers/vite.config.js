// Vite, as an app would configure it: nothing for Pippin. The dev server forwards
// /models to the test's static server (PIPPIN_MODELS_ORIGIN).
const models = process.env.PIPPIN_MODELS_ORIGIN;

export default {
  root: "app",
  base: "./",
  logLevel: "warn",
  build: { outDir: "../dist/vite", emptyOutDir: true },
  server: { proxy: models ? { "/models": models } : {} },
};
