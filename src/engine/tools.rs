//! Tool calls: a conversation with tools is rendered in the model's own tool syntax
//! (or the fallback system message), and the reply is generated under a grammar that
//! allows a call only in that syntax, to a tool offered, with arguments valid under
//! its schema — or, with `auto`, an answer in words. The reply's text is held back
//! while it may still become a call; a finished call is returned parsed, never as
//! text.

use super::{FinishReason, GenerateOptions};
use crate::error::{Error, Result};
use crate::guided::{guide_schema, ResponseFormat};
use crate::tokenizer::{
    tools::{check_tools, fallback_messages},
    FunctionCall, Message, Tokenizer, Tool, ToolCall, ToolSyntax,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Whether and which tool the model calls (OpenAI's `tool_choice`; absent: auto).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolChoice {
    /// `"auto"` (a call or an answer), `"required"` (a call), `"none"` (an answer;
    /// the tools are not offered).
    Mode(ToolMode),
    /// `{ type: "function", function: { name } }`: a call to that tool.
    Named { function: Named },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    Auto,
    Required,
    None,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    pub name: String,
}

/// A chat request with tools made ready to run: the prompt's ids, the options with
/// the call's grammar, and the reader that takes calls out of the reply.
pub struct Prepared {
    pub ids: Vec<u32>,
    pub opts: GenerateOptions,
    pub calls: Option<CallReader>,
}

/// Renders `messages` (with `opts.tools` offered, as `opts.tool_choice` says) and
/// sets the response format a call needs.
pub fn prepare(tk: &Tokenizer, messages: &[Message], opts: &GenerateOptions) -> Result<Prepared> {
    prepare_as(tk, messages, opts, true)
}

/// As `prepare`; `open`: the assistant's turn is opened at the end (a reply follows),
/// else the conversation ends where it does (a prefill for a reply later).
pub fn prepare_as(
    tk: &Tokenizer,
    messages: &[Message],
    opts: &GenerateOptions,
    open: bool,
) -> Result<Prepared> {
    let mut opts = opts.clone();
    let tools = std::mem::take(&mut opts.tools);
    check_tools(&tools)?;
    let callable = callable(&tools, opts.tool_choice.as_ref())?;
    let history = messages
        .iter()
        .any(|m| m.role == "tool" || !m.tool_calls.is_empty());
    if callable.is_empty() {
        // Earlier calls and results are the template's to render when it knows them.
        let ids = if history && !tk.tool_syntax().native {
            tk.encode_chat(&fallback_messages(messages, &[]), open)?
        } else {
            tk.encode_chat(messages, open)?
        };
        return Ok(Prepared {
            ids,
            opts,
            calls: None,
        });
    }
    if opts
        .response_format
        .as_ref()
        .is_some_and(|f| *f != ResponseFormat::Text)
    {
        return Err(Error::invalid(
            "a response format and tools cannot be used together (a call has its own format)",
        ));
    }
    let syntax = tk.tool_syntax();
    let ids = if syntax.native {
        tk.encode_chat_tools(messages, &tools, open)?
    } else {
        tk.encode_chat(&fallback_messages(messages, &tools), open)?
    };
    let may_answer = !matches!(
        opts.tool_choice,
        Some(ToolChoice::Mode(ToolMode::Required) | ToolChoice::Named { .. })
    );
    opts.response_format = Some(ResponseFormat::Grammar {
        grammar: grammar(tk, &syntax, &callable, may_answer),
    });
    Ok(Prepared {
        ids,
        opts,
        calls: Some(CallReader::new(visible(tk, &syntax), callable)),
    })
}

/// `syntax` as the reply's text shows it: special tokens are not text.
fn visible(tk: &Tokenizer, syntax: &ToolSyntax) -> ToolSyntax {
    let strip = |s: &str| {
        let mut out = String::new();
        let mut i = 0;
        while let Some(c) = s[i..].chars().next() {
            match tk.special_at(&s[i..]) {
                Some((len, _)) => i += len,
                None => {
                    out.push(c);
                    i += c.len_utf8();
                }
            }
        }
        out
    };
    ToolSyntax {
        before: strip(&syntax.before),
        after: strip(&syntax.after),
        answer_prefix: strip(&syntax.answer_prefix),
        ..syntax.clone()
    }
}

/// The tools a call may name (none: no call).
fn callable(tools: &[Tool], choice: Option<&ToolChoice>) -> Result<Vec<Tool>> {
    Ok(match choice {
        Some(ToolChoice::Mode(ToolMode::None)) => vec![],
        Some(ToolChoice::Mode(ToolMode::Required)) if tools.is_empty() => {
            return Err(Error::invalid(
                "tool_choice \"required\" needs at least one tool",
            ))
        }
        Some(ToolChoice::Named { function }) => {
            let t = tools.iter().find(|t| t.name() == function.name);
            vec![t.cloned().ok_or_else(|| {
                Error::invalid(format!(
                    "tool_choice names {:?}, which is not in tools",
                    function.name
                ))
            })?]
        }
        _ => tools.to_vec(),
    })
}

/// The JSON Schema of a call object in `syntax` to one of `tools`. Each tool's
/// `parameters` lives in the root's `$defs` (as `tool<i>`, its own definitions as
/// `tool<i>.<name>`) with its `$ref`s rewritten, so that references to its root or
/// its `$defs` (as zod and Pydantic write them) still resolve once nested.
fn call_schema(syntax: &ToolSyntax, tools: &[Tool]) -> Value {
    let mut defs = Map::new();
    let mut one = |(i, t): (usize, &Tool)| {
        let name = format!("tool{i}");
        let mut params = t.parameters();
        for key in ["$defs", "definitions"] {
            if let Some(Value::Object(d)) = params.as_object_mut().and_then(|p| p.remove(key)) {
                for (k, mut v) in d {
                    rebase_refs(&mut v, &name);
                    defs.insert(format!("{name}.{k}"), v);
                }
            }
        }
        rebase_refs(&mut params, &name);
        defs.insert(name.clone(), params);
        let mut props = Map::new();
        props.insert(syntax.name_key.clone(), json!({ "const": t.name() }));
        props.insert(
            syntax.args_key.clone(),
            json!({ "$ref": format!("#/$defs/{name}") }),
        );
        json!({
            "type": "object",
            "properties": props,
            "required": [syntax.name_key, syntax.args_key],
            "additionalProperties": false,
        })
    };
    let mut schema = match tools {
        [t] => one((0, t)),
        _ => json!({ "anyOf": tools.iter().enumerate().map(&mut one).collect::<Vec<_>>() }),
    };
    schema["$defs"] = Value::Object(defs);
    schema
}

/// Rewrites the local `$ref`s of tool `name`'s schema for its place in `$defs`:
/// `#/$defs/X…` and `#/definitions/X…` to `#/$defs/name.X…`, `#…` to `#/$defs/name…`.
fn rebase_refs(v: &mut Value, name: &str) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref") {
                if let Some(rest) = r.strip_prefix('#') {
                    let def = ["/$defs/", "/definitions/"]
                        .iter()
                        .find_map(|p| rest.strip_prefix(p));
                    *r = match def {
                        Some(d) => format!("#/$defs/{name}.{d}"),
                        None => format!("#/$defs/{name}{rest}"),
                    };
                }
            }
            m.values_mut().for_each(|x| rebase_refs(x, name));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rebase_refs(x, name)),
        _ => {}
    }
}

/// The Lark grammar of a reply: what a call and an answer share first, then the call
/// (its rest, the object, what follows it) or, when `may_answer`, text that cannot
/// begin a call.
fn grammar(tk: &Tokenizer, syntax: &ToolSyntax, tools: &[Tool], may_answer: bool) -> String {
    let shared = common_prefix(tk, &syntax.before, &syntax.answer_prefix);
    let call_rest = &syntax.before[shared.len()..];
    let answer_rest = &syntax.answer_prefix[shared.len()..];
    // Compact JSON as every guided reply; tool schemas are the app's, often loose
    // (`format`, `uniqueItems`, ...): what the grammar cannot express is ignored.
    let call = format!(
        "{} %json {} {}",
        literal(tk, call_rest),
        guide_schema(call_schema(syntax, tools), true),
        literal(tk, syntax.after.as_str())
    );
    let mut g = format!("start: {} body\n", literal(tk, shared));
    if may_answer {
        // An answer's first character is not one a call begins with.
        let first = call_rest.chars().next().unwrap_or('{');
        g += &format!(
            "body: call | answer\nanswer: {} /[^{}\\s][\\s\\S]*/\n",
            literal(tk, answer_rest),
            class_char(first)
        );
    } else {
        g += "body: call\n";
    }
    g + &format!("call: {call}\n")
}

/// The longest common prefix of `a` and `b` that does not end inside a special token
/// (the grammar asks for those whole).
fn common_prefix<'a>(tk: &Tokenizer, a: &'a str, b: &str) -> &'a str {
    let n = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i);
    let mut i = 0;
    while i < n {
        match tk.special_at(&a[i..]) {
            Some((len, _)) if i + len > n => return &a[..i],
            Some((len, _)) => i += len,
            None => i += a[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    &a[..n]
}

/// `text` as a Lark sequence: quoted strings, special tokens by id (`<[id]>`: a
/// special token's text is not text to the grammar).
fn literal(tk: &Tokenizer, text: &str) -> String {
    let mut parts = Vec::new();
    let (mut run, mut i) = (0, 0);
    while i < text.len() {
        match tk.special_at(&text[i..]) {
            Some((len, id)) => {
                if run < i {
                    parts.push(quoted(&text[run..i]));
                }
                parts.push(format!("<[{id}]>"));
                i += len;
                run = i;
            }
            None => i += text[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    if run < text.len() {
        parts.push(quoted(&text[run..]));
    }
    if parts.is_empty() {
        return "\"\"".into();
    }
    parts.join(" ")
}

fn quoted(s: &str) -> String {
    Value::from(s).to_string()
}

/// `c` inside a regex character class.
fn class_char(c: char) -> String {
    if "\\]^-[/".contains(c) {
        format!("\\{c}")
    } else {
        c.to_string()
    }
}

/// Takes calls out of a reply: text is held while it may still become a call, an
/// answer is passed on without the template's answer prefix, a finished call is
/// parsed.
pub struct CallReader {
    syntax: ToolSyntax,
    tools: Vec<Tool>,
    held: String,
    /// Still undecided whether the reply is a call.
    holding: bool,
}

/// Call ids: a counter after the time this process first made one (in ms), so ids of
/// a conversation kept across page loads do not repeat.
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn call_id() -> String {
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        web_time::SystemTime::now()
            .duration_since(web_time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    });
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    format!("call_{start:x}_{n}")
}

impl CallReader {
    fn new(syntax: ToolSyntax, tools: Vec<Tool>) -> CallReader {
        CallReader {
            syntax,
            tools,
            held: String::new(),
            holding: true,
        }
    }

    /// The text of a call so far, up to its object's first character.
    fn call_start(&self) -> String {
        format!("{}{{", self.syntax.before)
    }

    /// The part of `piece` to pass on now.
    pub fn push(&mut self, piece: &str) -> String {
        if !self.holding {
            return piece.to_string();
        }
        self.held.push_str(piece);
        let (start, held) = (self.call_start(), self.held.as_str());
        // Held while it may become a call, or is still within the answer's prefix.
        if start.starts_with(held)
            || held.starts_with(&start)
            || self.syntax.answer_prefix.starts_with(held)
        {
            return String::new();
        }
        self.holding = false;
        self.answer_text()
    }

    fn answer_text(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        match held.strip_prefix(self.syntax.answer_prefix.as_str()) {
            Some(rest) => rest.to_string(),
            None => held,
        }
    }

    /// At the reply's end: how it ended (`ToolCalls` when it is a complete call), the
    /// calls, and text still held to pass on.
    pub fn finish(&mut self, finish: FinishReason) -> (FinishReason, Vec<ToolCall>, String) {
        if !self.holding {
            return (finish, vec![], String::new());
        }
        self.holding = false;
        let parsed = self.syntax.parse_call(&self.held);
        match parsed {
            Some((name, arguments))
                if finish == FinishReason::Stop && self.tools.iter().any(|t| t.name() == name) =>
            {
                self.held.clear();
                let call = ToolCall {
                    id: Some(call_id()),
                    kind: "function".into(),
                    function: FunctionCall { name, arguments },
                };
                (FinishReason::ToolCalls, vec![call], String::new())
            }
            _ => (finish, vec![], self.answer_text()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template's syntax with an answer prefix (an empty reasoning block, as Qwen 3
    /// writes one) before both answers and calls; other tags and keys than Qwen's.
    fn prefixed() -> ToolSyntax {
        ToolSyntax {
            before: "<r>\n</r>\n<call>".into(),
            after: "</call>".into(),
            name_key: "tool".into(),
            args_key: "args".into(),
            answer_prefix: "<r>\n</r>\n".into(),
            native: true,
        }
    }

    fn tool(name: &str) -> Tool {
        serde_json::from_value(json!({"type": "function", "function": {"name": name}})).unwrap()
    }

    /// An answer streamed in small pieces loses the template's answer prefix, however
    /// the pieces split it; a call streams nothing and comes back parsed.
    #[test]
    fn reader_streams_answers_and_holds_calls() {
        for cut in 1..8 {
            let text = "<r>\n</r>\nHello there";
            let mut r = CallReader::new(prefixed(), vec![tool("f")]);
            let chars: Vec<char> = text.chars().collect();
            let mut out = String::new();
            for piece in chars.chunks(cut) {
                out += &r.push(&piece.iter().collect::<String>());
            }
            let (finish, calls, rest) = r.finish(FinishReason::Stop);
            out += &rest;
            assert_eq!(
                (out.as_str(), finish, calls.len()),
                ("Hello there", FinishReason::Stop, 0)
            );
        }
        let call = "<r>\n</r>\n<call>{\"tool\":\"f\",\"args\":{\"x\":1}}</call>";
        let mut r = CallReader::new(prefixed(), vec![tool("f")]);
        let streamed: String = call.chars().map(|c| r.push(&c.to_string())).collect();
        assert_eq!(streamed, "");
        let (finish, calls, rest) = r.finish(FinishReason::Stop);
        assert_eq!((finish, rest.as_str()), (FinishReason::ToolCalls, ""));
        assert_eq!(calls[0].function.name, "f");
        assert_eq!(calls[0].function.arguments, json!({"x": 1}));
        // A call to a tool not offered is not a call.
        let mut r = CallReader::new(prefixed(), vec![tool("g")]);
        r.push(call);
        assert_eq!(r.finish(FinishReason::Stop).0, FinishReason::Stop);
    }

    #[test]
    fn references_are_rebased() {
        let mut v = json!({"a": {"$ref": "#/$defs/X/properties/y"}, "b": [{"$ref": "#"}],
            "c": {"$ref": "#/definitions/Z"}, "d": {"$ref": "https://example.com/s"}});
        rebase_refs(&mut v, "tool1");
        assert_eq!(v["a"]["$ref"], "#/$defs/tool1.X/properties/y");
        assert_eq!(v["b"][0]["$ref"], "#/$defs/tool1");
        assert_eq!(v["c"]["$ref"], "#/$defs/tool1.Z");
        assert_eq!(v["d"]["$ref"], "https://example.com/s");
    }
}
