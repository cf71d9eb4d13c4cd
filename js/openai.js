// OpenAI's chat API over a Pippin (either entry): `llm.chat.completions.create(params)`
// takes OpenAI's request shape and answers with a `chat.completion`, or, with
// `stream: true`, an async iterable of `chat.completion.chunk`s. Code written for
// OpenAI's (or WebLLM's) client runs with only the import changed.
//
// Tools go to the engine, which renders them with the model's own chat template (or a
// documented system message when the template knows no tools) and generates a call
// under a grammar built from them (so its name and arguments are always valid); it
// comes back as `tool_calls` with finish_reason "tool_calls".

import { PippinError } from "./errors.js";

let counter = 0;
const newId = (prefix) => `${prefix}-${Date.now().toString(36)}${(counter++).toString(36)}`;

function bad(message) {
  return new PippinError("BadOptions", `chat.completions.create: ${message}`);
}

/** OpenAI messages as Pippin's (the engine reads OpenAI's shape: content parts,
 * assistant tool_calls, tool results); "developer" is the system role. */
function messagesOf(messages) {
  if (!Array.isArray(messages) || messages.length === 0) throw bad("messages must be a non-empty array");
  return messages.map((m) => {
    if (!m || typeof m.role !== "string") throw bad("each message needs a role");
    const out = { role: m.role === "developer" ? "system" : m.role, content: m.content ?? null };
    if (Array.isArray(m.tool_calls) && m.tool_calls.length) out.tool_calls = m.tool_calls;
    if (m.tool_call_id != null) out.tool_call_id = String(m.tool_call_id);
    return out;
  });
}

/** Pippin's responseFormat for OpenAI's response_format. */
function responseFormatOf(rf) {
  if (rf == null || rf.type === "text") return undefined;
  if (rf.type === "json_object") return { type: "json_object" };
  if (rf.type === "json_schema") {
    const js = rf.json_schema;
    if (!js || typeof js.schema !== "object") throw bad("response_format.json_schema.schema must be a JSON Schema object");
    return { type: "json_schema", schema: js.schema, strict: js.strict ?? undefined };
  }
  throw bad(`response_format type ${JSON.stringify(rf.type)} is not supported (text, json_object, json_schema)`);
}

function optionsOf(params, requestOptions) {
  if (params.n != null && params.n !== 1) throw bad("n must be 1");
  const o = {
    // OpenAI's defaults: temperature 1, top_p 1.
    temperature: params.temperature ?? 1,
    topP: params.top_p ?? 1,
  };
  const max = params.max_completion_tokens ?? params.max_tokens;
  if (max != null) o.maxTokens = max;
  if (params.seed != null) o.seed = params.seed;
  if (params.stop != null) o.stop = params.stop;
  if (params.adapter !== undefined) o.adapter = params.adapter;
  if (params.speculation !== undefined) o.speculation = params.speculation;
  if (params.top_logprobs != null && !params.logprobs) throw bad("top_logprobs needs logprobs: true");
  if (params.logprobs) o.logprobs = params.top_logprobs ?? 0;
  if (params.logit_bias != null) {
    if (typeof params.logit_bias !== "object") throw bad("logit_bias maps token ids to biases from -100 to 100");
    o.logitBias = params.logit_bias;
  }
  if (params.tools != null) {
    if (!Array.isArray(params.tools)) throw bad("tools must be an array");
    if (params.tools.length) {
      o.tools = params.tools;
      if (params.tool_choice != null) o.toolChoice = params.tool_choice;
    }
  }
  const format = responseFormatOf(params.response_format);
  if (format) o.responseFormat = format;
  const signal = requestOptions?.signal ?? params.signal;
  if (signal) o.signal = signal;
  return o;
}

/** OpenAI's tool_calls (arguments as JSON text) from a finished reply's. */
function toolCallsOf(calls) {
  return calls.map((c) => ({ id: c.id, type: "function", function: { name: c.function.name, arguments: JSON.stringify(c.function.arguments ?? {}) } }));
}

/** OpenAI's log-probabilities of a chunk's tokens. */
function logprobsOf(lps) {
  // A token the model rules out (-inf, null in JSON): OpenAI's -9999.
  const one = (t) => ({ token: t.token, logprob: t.logprob ?? -9999, bytes: t.bytes });
  return lps.map((t) => ({ ...one(t), top_logprobs: t.topLogprobs.map(one) }));
}

/** A finished reply's message. */
function messageOf(text, end) {
  if (end.toolCalls?.length) return { role: "assistant", content: null, tool_calls: toolCallsOf(end.toolCalls) };
  return { role: "assistant", content: text };
}

function usageOf(u) {
  const prompt = u?.promptTokens ?? 0;
  const completion = u?.generatedTokens ?? 0;
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** `chat.completions` for `llm` (a Pippin of either entry). */
export function completionsFor(llm) {
  return {
    async create(params, requestOptions) {
      if (!params || typeof params !== "object") throw bad("params must be an object");
      const messages = messagesOf(params.messages);
      const options = optionsOf(params, requestOptions);
      const info = await llm.info();
      const model = params.model ?? info?.config?.arch ?? "pippin";
      const base = { id: newId("chatcmpl"), created: Math.floor(Date.now() / 1000), model };
      const reply = llm.chat(messages, options);
      if (params.stream) return stream(reply, base, options.logprobs !== undefined);
      let text = "";
      let end;
      const content = [];
      for await (const c of reply) {
        if (c.done) end = c;
        else text += c.text;
        if (c.logprobs) content.push(...logprobsOf(c.logprobs));
      }
      const logprobs = options.logprobs === undefined ? null : { content, refusal: null };
      return {
        ...base,
        object: "chat.completion",
        choices: [{ index: 0, message: messageOf(text, end), finish_reason: end.finishReason, logprobs }],
        usage: usageOf(end.usage),
      };
    },
  };
}

/**
 * The chunks of a streamed completion: the role first, then content deltas, then the
 * finish reason with the usage. A tool call comes whole once it is complete (the
 * engine never streams a call's text as content).
 */
async function* stream(reply, base, withLogprobs) {
  const chunk = (delta, finish_reason = null, extra = {}, lps = null) => ({
    ...base,
    object: "chat.completion.chunk",
    choices: [{ index: 0, delta, finish_reason, logprobs: withLogprobs && lps ? { content: logprobsOf(lps), refusal: null } : null }],
    ...extra,
  });
  yield chunk({ role: "assistant", content: "" });
  for await (const c of reply) {
    if (c.done) {
      if (c.toolCalls?.length) yield chunk({ tool_calls: toolCallsOf(c.toolCalls).map((t, index) => ({ index, ...t })) });
      yield chunk({}, c.finishReason, { usage: usageOf(c.usage) });
      return;
    }
    if (c.text) yield chunk({ content: c.text }, null, {}, c.logprobs ?? []);
  }
}
