// OpenAI's chat API over a Pippin (either entry): `llm.chat.completions.create(params)`
// takes OpenAI's request shape and answers with a `chat.completion`, or, with
// `stream: true`, an async iterable of `chat.completion.chunk`s. Code written for
// OpenAI's (or WebLLM's) client runs with only the import changed.
//
// Tools: the definitions are described to the model in a system message, and a call
// is generated under a JSON Schema built from them (so its name and arguments are
// always valid); it comes back as `tool_calls` with finish_reason "tool_calls".

let counter = 0;
const newId = (prefix) => `${prefix}-${Date.now().toString(36)}${(counter++).toString(36)}`;

function bad(message) {
  return new Error(`chat.completions.create: ${message}`);
}

/** OpenAI content (a string, or parts) as text. */
function textOf(content) {
  if (content == null) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((p) => {
        if (p?.type === "text") return String(p.text ?? "");
        throw bad(`content parts of type ${JSON.stringify(p?.type)} are not supported (text only)`);
      })
      .join("");
  }
  throw bad("a message's content must be a string or an array of text parts");
}

function toolList(tools) {
  if (tools == null) return [];
  if (!Array.isArray(tools)) throw bad("tools must be an array");
  return tools.map((t) => {
    const f = t?.function;
    if (t?.type !== "function" || typeof f?.name !== "string" || !f.name) {
      throw bad('each tool must be { type: "function", function: { name, description?, parameters? } }');
    }
    return { name: f.name, description: f.description ?? "", parameters: f.parameters ?? { type: "object", properties: {} } };
  });
}

/** The JSON Schema of a call to one of `tools`: { name, arguments }. */
function callSchema(tools) {
  const one = (t) => ({
    type: "object",
    properties: { name: { const: t.name }, arguments: t.parameters },
    required: ["name", "arguments"],
    additionalProperties: false,
  });
  return tools.length === 1 ? one(tools[0]) : { anyOf: tools.map(one) };
}

function toolPrompt(tools) {
  const list = tools.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters }));
  return (
    "You can call these tools:\n" +
    JSON.stringify(list) +
    '\nTo call a tool, reply with only a JSON object {"name": <tool name>, "arguments": <arguments object>}.'
  );
}

/** OpenAI messages as Pippin's [{ role, content }] (tool calls and results as text). */
function messagesOf(messages, tools) {
  if (!Array.isArray(messages) || messages.length === 0) throw bad("messages must be a non-empty array");
  const out = messages.map((m) => {
    if (!m || typeof m.role !== "string") throw bad("each message needs a role");
    if (m.role === "assistant" && Array.isArray(m.tool_calls) && m.tool_calls.length) {
      const calls = m.tool_calls.map((c) => ({ name: c.function?.name, arguments: JSON.parse(c.function?.arguments || "{}") }));
      return { role: "assistant", content: JSON.stringify(calls.length === 1 ? calls[0] : calls) };
    }
    if (m.role === "tool") {
      return { role: "user", content: `Tool result${m.tool_call_id ? ` (${m.tool_call_id})` : ""}: ${textOf(m.content)}` };
    }
    const role = m.role === "developer" ? "system" : m.role;
    return { role, content: textOf(m.content) };
  });
  if (tools.length) {
    const sys = toolPrompt(tools);
    if (out[0].role === "system") out[0] = { role: "system", content: `${out[0].content}\n\n${sys}` };
    else out.unshift({ role: "system", content: sys });
  }
  return out;
}

/** Which tools may be called: null (none), or the list a call must come from. */
function toolsToCall(tools, choice) {
  if (!tools.length || choice === "none") return null;
  if (choice === undefined || choice === "auto" || choice === "required") return tools;
  const name = choice?.function?.name;
  const t = tools.find((x) => x.name === name);
  if (!t) throw bad(`tool_choice names ${JSON.stringify(name)}, which is not in tools`);
  return [t];
}

/** Pippin's responseFormat for a request. */
function responseFormatOf(params, callable) {
  if (callable) {
    const call = callSchema(callable);
    if (params.tool_choice === undefined || params.tool_choice === "auto") {
      // Text, or a call: a text answer cannot start with "{".
      const grammar = `start: call | answer\ncall: %json ${JSON.stringify(call)}\nanswer: /[^{\\s][\\s\\S]*/\n`;
      return { type: "grammar", grammar };
    }
    return { type: "json_schema", schema: call, strict: true };
  }
  const rf = params.response_format;
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
  const signal = requestOptions?.signal ?? params.signal;
  if (signal) o.signal = signal;
  return o;
}

/** A finished reply's message and finish reason, tool calls parsed out. */
function messageOf(text, finish, callable) {
  if (callable && finish === "stop" && text.trimStart().startsWith("{")) {
    try {
      const call = JSON.parse(text);
      if (callable.some((t) => t.name === call.name)) {
        const tool_calls = [{ id: newId("call"), type: "function", function: { name: call.name, arguments: JSON.stringify(call.arguments ?? {}) } }];
        return { message: { role: "assistant", content: null, tool_calls }, finish_reason: "tool_calls" };
      }
    } catch {
      // Not a call after all: the text is the answer.
    }
  }
  return { message: { role: "assistant", content: text }, finish_reason: finish };
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
      const tools = toolList(params.tools);
      const callable = toolsToCall(tools, params.tool_choice);
      const messages = messagesOf(params.messages, callable ? tools : []);
      const options = optionsOf(params, requestOptions);
      const format = responseFormatOf(params, callable);
      if (format) options.responseFormat = format;
      const info = await llm.info();
      const model = params.model ?? info?.config?.arch ?? "pippin";
      const base = { id: newId("chatcmpl"), created: Math.floor(Date.now() / 1000), model };
      const reply = llm.chat(messages, options);
      if (params.stream) return stream(reply, base, callable);
      let text = "";
      let end;
      for await (const c of reply) {
        if (c.done) end = c;
        else text += c.text;
      }
      const { message, finish_reason } = messageOf(text, end.finishReason, callable);
      return {
        ...base,
        object: "chat.completion",
        choices: [{ index: 0, message, finish_reason, logprobs: null }],
        usage: usageOf(end.usage),
      };
    },
  };
}

/**
 * The chunks of a streamed completion: the role first, then content deltas, then the
 * finish reason with the usage. A tool call is sent whole once it is complete (its
 * text is held back, never streamed as content).
 */
async function* stream(reply, base, callable) {
  const chunk = (delta, finish_reason = null, extra = {}) => ({
    ...base,
    object: "chat.completion.chunk",
    choices: [{ index: 0, delta, finish_reason, logprobs: null }],
    ...extra,
  });
  yield chunk({ role: "assistant", content: "" });
  let text = "";
  // While the reply may still be a tool call (blank so far, or "{" first), hold it.
  let holding = Boolean(callable);
  for await (const c of reply) {
    if (c.done) {
      if (holding) {
        const { message, finish_reason } = messageOf(text, c.finishReason, callable);
        if (message.tool_calls) {
          yield chunk({ tool_calls: message.tool_calls.map((t, index) => ({ index, ...t })) });
          yield chunk({}, finish_reason, { usage: usageOf(c.usage) });
          return;
        }
        if (text) yield chunk({ content: text });
      }
      yield chunk({}, c.finishReason, { usage: usageOf(c.usage) });
      return;
    }
    text += c.text;
    if (holding) {
      const t = text.trimStart();
      if (t === "" || t.startsWith("{")) continue;
      holding = false;
      yield chunk({ content: text });
    } else if (c.text) {
      yield chunk({ content: c.text });
    }
  }
}
