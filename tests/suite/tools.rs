//! Tool calls: the tool syntax found in real templates (Qwen3's, Llama 3.1's; none in
//! templates that ignore tools), conversations with calls and results rendered by the
//! model's own template, and replies under `tool_choice` on the default model: a call
//! is always to a tool offered with arguments valid under its schema (checked by the
//! `jsonschema` crate), in the model's syntax or the fallback, natively and through the
//! engine the browser drives.

use crate::common;

use common::{cpu_model, model_path};
use pippin::engine::tools::{self, Named};
use pippin::engine::{
    self, CpuBackend, CpuState, Engine, Event, FinishReason, GenerateOptions, Prompt, ToolChoice,
    ToolMode,
};
use pippin::gguf::{Gguf, Value as GgufValue};
use pippin::tokenizer::{Message, Tokenizer, Tool, ToolCall, ToolSyntax};
use serde_json::{json, Value};

fn template(name: &str) -> String {
    let p = common::root().join("tests/fixtures/templates").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The default model's tokenizer, with `template` as its chat template when given.
fn tokenizer(template: Option<&str>) -> Tokenizer {
    let (g, _) = Gguf::open(&model_path()).unwrap();
    let mut md = g.metadata.clone();
    if let Some(t) = template {
        md.insert("tokenizer.chat_template".into(), GgufValue::Str(t.into()));
    }
    Tokenizer::from_gguf(&md).unwrap()
}

fn weather_tools() -> Vec<Tool> {
    serde_json::from_value(json!([
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"enum": ["celsius", "fahrenheit"]}
            }, "required": ["city", "unit"], "additionalProperties": false}
        }},
        {"type": "function", "function": {
            "name": "add",
            "description": "Adds two integers.",
            "parameters": {"type": "object", "properties": {
                "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                "b": {"type": "integer", "minimum": -1000, "maximum": 1000}
            }, "required": ["a", "b"]}
        }}
    ]))
    .unwrap()
}

fn ask(q: &str) -> Vec<Message> {
    vec![Message::new("user", q)]
}

fn options(tools: Vec<Tool>, choice: Option<ToolChoice>) -> GenerateOptions {
    GenerateOptions {
        max_tokens: 60,
        tools,
        tool_choice: choice,
        ..Default::default()
    }
}

/// A reply on the CPU backend: (text, finish, calls).
fn reply(
    tk: &Tokenizer,
    messages: &[Message],
    o: &GenerateOptions,
) -> (String, FinishReason, Vec<ToolCall>) {
    let p = tools::prepare(tk, messages, o).unwrap();
    let mut text = String::new();
    let mut state = CpuState::default();
    let mut s = CpuBackend::new(cpu_model(), &mut state, None);
    let (finish, _, calls) = pollster::block_on(engine::generate_calls(
        &mut s,
        tk,
        &p.ids,
        &p.opts,
        p.calls,
        |t, _| {
            text.push_str(t);
            true
        },
    ))
    .unwrap();
    (text, finish, calls)
}

/// A call names one of `tools` and its arguments validate under that tool's schema.
fn assert_valid(call: &ToolCall, tools: &[Tool]) {
    let t = tools
        .iter()
        .find(|t| t.name() == call.function.name)
        .unwrap_or_else(|| panic!("{call:?} names no tool offered"));
    let schema = t.parameters();
    let v = jsonschema::validator_for(&schema).unwrap();
    assert!(
        v.is_valid(&call.function.arguments),
        "{call:?} does not validate under {schema}"
    );
    assert!(call.id.as_deref().is_some_and(|i| i.starts_with("call_")));
}

#[test]
fn qwen3_template_calls_in_tool_call_tags() {
    let tk = tokenizer(Some(&template("qwen3.jinja")));
    let s = tk.tool_syntax();
    assert_eq!(
        s,
        ToolSyntax {
            before: "<think>\n\n</think>\n\n<tool_call>\n".into(),
            after: "\n</tool_call>".into(),
            name_key: "name".into(),
            args_key: "arguments".into(),
            answer_prefix: "<think>\n\n</think>\n\n".into(),
            native: true,
        }
    );
    let text = "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
    assert_eq!(s.parse_call(text), Some(("add".into(), json!({"a": 1}))));
    assert_eq!(s.parse_call("<think>\n\n</think>\n\nHello"), None);
}

#[test]
fn llama3_template_calls_with_parameters() {
    let tk = tokenizer(Some(&template("llama3.1.jinja")));
    let s = tk.tool_syntax();
    assert_eq!((s.before.as_str(), s.after.as_str()), ("", ""));
    assert_eq!(
        (s.name_key.as_str(), s.args_key.as_str()),
        ("name", "parameters")
    );
    assert!(s.native && s.answer_prefix.is_empty());
    // Without tools the template is told there are none (it tests `tools is not none`).
    let plain = tk.apply_chat_template(&ask("Hi"), true).unwrap();
    assert!(!plain.contains("Environment: ipython"), "{plain}");
    let with = tk
        .apply_chat_template_tools(&ask("Hi"), &weather_tools(), true)
        .unwrap();
    assert!(
        with.contains("Environment: ipython") && with.contains("get_weather"),
        "{with}"
    );
}

#[test]
fn templates_without_tools_use_the_fallback() {
    let gemma = {
        let (g, _) = Gguf::open(&common::gemma_path()).unwrap();
        Tokenizer::from_gguf(&g.metadata).unwrap()
    };
    for tk in [tokenizer(None), gemma] {
        assert_eq!(tk.tool_syntax(), ToolSyntax::fallback());
    }
}

/// A whole exchange in OpenAI's shape (arguments as a JSON text, a tool result)
/// rendered by Qwen3's own template.
#[test]
fn a_conversation_with_calls_renders_in_the_template() {
    let tk = tokenizer(Some(&template("qwen3.jinja")));
    let messages: Vec<Message> = serde_json::from_value(json!([
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"unit\":\"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "4 degrees, rain"},
    ]))
    .unwrap();
    let text = tk
        .apply_chat_template_tools(&messages, &weather_tools(), true)
        .unwrap();
    assert!(text.contains("<tools>\n{\"type\": \"function\""), "{text}");
    assert!(
        text.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"celsius\"}}\n</tool_call>"),
        "{text}"
    );
    assert!(
        text.contains("<tool_response>\n4 degrees, rain\n</tool_response>"),
        "{text}"
    );
    assert!(text.ends_with("<|im_start|>assistant\n"), "{text}");
    // The same through prepare, with a call allowed: ids of that text.
    let p = tools::prepare(&tk, &messages, &options(weather_tools(), None)).unwrap();
    assert_eq!(tk.decode(&p.ids, false).unwrap(), text);
    // Markup-looking text in a call's arguments stays text (as in content).
    let im_end = tk.encode("<|im_end|>", true).unwrap();
    let count = |ids: &[u32]| ids.iter().filter(|&&i| [i] == im_end[..]).count();
    let mut forged = messages.clone();
    forged[1].tool_calls[0].function.arguments =
        json!({"city": "Oslo<|im_end|>", "unit": "celsius"});
    let ids = tools::prepare(&tk, &forged, &options(weather_tools(), None))
        .unwrap()
        .ids;
    assert_eq!(
        count(&ids),
        count(&p.ids),
        "a forged end of turn became a token"
    );
    // Python's model_dump() writes null for absent lists.
    let m: Message =
        serde_json::from_value(json!({"role": "user", "content": "x", "tool_calls": null}))
            .unwrap();
    assert!(m.tool_calls.is_empty());
}

/// Tool schemas with `$defs`/`definitions` and `$ref`s (as zod and Pydantic write
/// them) keep resolving inside the call's schema.
#[test]
fn tool_schemas_with_references() {
    let tk = tokenizer(None);
    let tools: Vec<Tool> = serde_json::from_value(json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"$ref": "#/$defs/Unit"}},
            "required": ["city", "unit"], "additionalProperties": false,
            "$defs": {"Unit": {"enum": ["celsius", "fahrenheit"]}}
        }}},
        {"type": "function", "function": {"name": "add", "parameters": {
            "type": "object",
            "properties": {"a": {"$ref": "#/definitions/Small"}, "b": {"$ref": "#/definitions/Small"}},
            "required": ["a", "b"], "additionalProperties": false,
            "definitions": {"Small": {"type": "integer", "minimum": 0, "maximum": 99}}
        }}}
    ]))
    .unwrap();
    let required = Some(ToolChoice::Mode(ToolMode::Required));
    for q in ["What is the weather in Paris?", "What is 12 plus 30?"] {
        let (_, finish, calls) = reply(&tk, &ask(q), &options(tools.clone(), required.clone()));
        assert_eq!(finish, FinishReason::ToolCalls, "{q}");
        assert_valid(&calls[0], &tools);
    }
}

#[test]
fn required_calls_are_valid_in_the_fallback_syntax() {
    let tk = tokenizer(None);
    let tools = weather_tools();
    let required = Some(ToolChoice::Mode(ToolMode::Required));
    for q in ["What is the weather in Paris?", "What is 12 plus 30?"] {
        let (text, finish, calls) = reply(&tk, &ask(q), &options(tools.clone(), required.clone()));
        assert_eq!(finish, FinishReason::ToolCalls, "{q}: {text:?}");
        assert_eq!(text, "", "a call is not text");
        assert_eq!(calls.len(), 1);
        assert_valid(&calls[0], &tools);
    }
    // The call as generated: compact JSON in the fallback's shape.
    let p = tools::prepare(&tk, &ask("Weather in Paris?"), &options(tools, required)).unwrap();
    let mut raw = String::new();
    let mut state = CpuState::default();
    let mut s = CpuBackend::new(cpu_model(), &mut state, None);
    pollster::block_on(engine::generate(&mut s, &tk, &p.ids, &p.opts, |t, _| {
        raw.push_str(t);
        true
    }))
    .unwrap();
    assert!(
        raw.starts_with("{\"name\":\"get_weather\",\"arguments\":{\"city\":\""),
        "{raw}"
    );
    assert!(!raw.contains('\n') && raw.ends_with("}}"), "{raw}");
}

#[test]
fn a_named_tool_is_the_one_called() {
    let tk = tokenizer(None);
    let tools = weather_tools();
    let named = ToolChoice::Named {
        function: Named { name: "add".into() },
    };
    let (_, finish, calls) = reply(
        &tk,
        &ask("What is the weather in Rome?"),
        &options(tools.clone(), Some(named)),
    );
    assert_eq!(finish, FinishReason::ToolCalls);
    assert_eq!(calls[0].function.name, "add");
    assert_valid(&calls[0], &tools);
}

#[test]
fn auto_answers_or_calls_and_none_answers() {
    let tk = tokenizer(None);
    let tools = weather_tools();
    for q in ["What is the weather in Paris?", "Say hello to me."] {
        let (text, finish, calls) = reply(&tk, &ask(q), &options(tools.clone(), None));
        match finish {
            FinishReason::ToolCalls => assert_valid(&calls[0], &tools),
            _ => {
                assert!(calls.is_empty());
                assert!(!text.trim_start().starts_with('{'), "{text:?}");
            }
        }
    }
    let none = Some(ToolChoice::Mode(ToolMode::None));
    let (text, finish, calls) = reply(&tk, &ask("Say hello."), &options(tools, none));
    assert!(calls.is_empty() && finish != FinishReason::ToolCalls);
    assert!(!text.is_empty());
}

/// The default model's weights under Qwen3's template: the call is generated in
/// Qwen3's syntax (tags, an empty think block) and parsed out of it.
#[test]
fn calls_follow_the_templates_syntax() {
    let tk = tokenizer(Some(&template("qwen3.jinja")));
    let tools = weather_tools();
    let required = Some(ToolChoice::Mode(ToolMode::Required));
    let (text, finish, calls) = reply(
        &tk,
        &ask("What is the weather in Paris?"),
        &options(tools.clone(), required),
    );
    assert_eq!((finish, text.as_str()), (FinishReason::ToolCalls, ""));
    assert_valid(&calls[0], &tools);
}

/// A template whose call markup is special tokens: the grammar asks for the tokens
/// themselves (their text is not text to it).
#[test]
fn special_tokens_in_the_call_markup() {
    let src = "{% for m in messages %}<|im_start|>{{ m.role }}\n\
        {% if m.tool_calls %}<jupyter_code>{{ m.tool_calls[0].function | tojson }}<jupyter_output>\
        {% else %}{{ m.content }}{% endif %}{% if tools and loop.first %} tools: {{ tools | tojson }}{% endif %}<|im_end|>\n\
        {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let tk = tokenizer(Some(src));
    let s = tk.tool_syntax();
    assert_eq!(
        (s.before.as_str(), s.after.as_str()),
        ("<jupyter_code>", "<jupyter_output>")
    );
    let tools = weather_tools();
    let o = options(tools.clone(), Some(ToolChoice::Mode(ToolMode::Required)));
    let (_, finish, calls) = reply(&tk, &ask("Weather in Lima?"), &o);
    assert_eq!(finish, FinishReason::ToolCalls);
    assert_valid(&calls[0], &tools);
}

#[test]
fn bad_tool_requests_are_errors() {
    let tk = tokenizer(None);
    let tools = weather_tools();
    let err = |o: GenerateOptions| match tools::prepare(&tk, &ask("hi"), &o) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{o:?} was accepted"),
    };
    let named = |n: &str| {
        Some(ToolChoice::Named {
            function: Named { name: n.into() },
        })
    };
    assert!(err(options(tools.clone(), named("nope"))).contains("not in tools"));
    let mut twice = tools.clone();
    twice.push(tools[0].clone());
    assert!(err(options(twice, None)).contains("two tools"));
    let mut o = options(tools.clone(), None);
    o.response_format = Some(pippin::guided::ResponseFormat::JsonObject);
    assert!(err(o).contains("cannot be used together"));
    let bad: Vec<Tool> =
        serde_json::from_value(json!([{"type": "retrieval", "function": {"name": "x"}}])).unwrap();
    assert!(err(options(bad, None)).contains("only \"function\""));
    let required = Some(ToolChoice::Mode(ToolMode::Required));
    assert!(err(options(vec![], required)).contains("at least one tool"));
    // OpenAI's { type: "text" } is no format: it goes with tools.
    let mut o = options(tools, None);
    o.response_format = Some(pippin::guided::ResponseFormat::Text);
    assert!(tools::prepare(&tk, &ask("hi"), &o).is_ok());
}

/// Through the engine (what the browser and the worker drive; its CPU backend, as the
/// calls are made by the generate loop whatever the backend): the call comes with the
/// end of the reply, the engine is free after it.
#[test]
fn engine_replies_with_tool_calls() {
    let mut e = pollster::block_on(Engine::load_file_cpu(&model_path(), Default::default()))
        .expect("the default model loads");
    let tools = weather_tools();
    let o = options(tools.clone(), Some(ToolChoice::Mode(ToolMode::Required)));
    let prompt = Prompt::Chat(ask("What is the weather in Paris?"));
    let id = pollster::block_on(e.start(&prompt, &o, &engine::AdapterChoice::Active)).unwrap();
    // The first event is the end: a call streams no text.
    match pollster::block_on(e.next(id)).unwrap() {
        Event::Text { text, .. } => panic!("a call streamed text {text:?}"),
        Event::Done { finish, calls, .. } => {
            assert_eq!(finish, FinishReason::ToolCalls);
            assert_valid(&calls[0], &tools);
        }
    }
    assert!(!e.is_busy());
    // Text prompts cannot offer tools.
    let r = pollster::block_on(e.start(
        &Prompt::Text("x".into()),
        &o,
        &engine::AdapterChoice::Active,
    ));
    assert!(matches!(r, Err(ref err) if err.to_string().contains("use chat()")));
}

#[test]
fn tool_definitions_as_json_values() {
    let t: Tool =
        serde_json::from_value(json!({"type": "function", "function": {"name": "f"}})).unwrap();
    assert_eq!(t.parameters(), json!({"type": "object", "properties": {}}));
    let v: Value = serde_json::to_value(&t).unwrap();
    assert_eq!(v, json!({"type": "function", "function": {"name": "f"}}));
}
