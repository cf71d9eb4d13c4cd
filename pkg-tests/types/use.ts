// What a TypeScript app writes against the package's types (js/*.d.ts, checked by
// `tsc` in types.test.mjs): "pippin" and "pippin/worker" offer one API, the worker's
// methods answering Promises; a misuse is a compile error (`@ts-expect-error`).
import { Pippin, type Chunk, type Reply, type Stats } from "pippin";
import { Pippin as WorkerPippin } from "pippin/worker";
import { LanguageModel } from "pippin/prompt-api";

export async function inPage(url: string): Promise<string> {
  const llm = await Pippin.load(url, { onProgress: (p) => void p });
  let text = "";
  for await (const c of llm.generate("Once upon a time", { maxTokens: 8 })) text += c.text;
  const stats: Stats = llm.stats();
  llm.useAdapter(null);
  const done = await llm.chat.completions.create({ messages: [{ role: "user", content: "Hi" }] });
  // @ts-expect-error maxTokens is a number
  llm.generate("x", { maxTokens: "8" });
  return `${text}${stats.decodeTokensPerS}${done.choices[0].message.content ?? ""}`;
}

export async function inWorker(url: string): Promise<string> {
  const llm = await WorkerPippin.load(url, { maxContext: 1024 });
  const reply: Reply = llm.chat([{ role: "user", content: "Hi" }], { temperature: 0 });
  const chunks: Chunk[] = [];
  for await (const c of reply) chunks.push(c);
  const stats: Stats = await llm.stats();
  await llm.useAdapter(null);
  // @ts-expect-error stats() crosses to the worker: a Promise of Stats
  const now: Stats = llm.stats();
  const stream = await llm.chat.completions.create({ messages: [], stream: true });
  for await (const c of stream) chunks.length += c.choices.length;
  await llm.dispose();
  return `${chunks.length}${stats.decodeTokensPerS}${now}`;
}

export async function promptApi(): Promise<string> {
  const session = await LanguageModel.create();
  return session.prompt("Hi");
}
