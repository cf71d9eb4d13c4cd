//! Tools in a conversation, in OpenAI's shape, and how a model's chat template writes
//! a call. A template that renders tools (Qwen3, Llama 3.x, Hermes-style) is probed:
//! a conversation whose assistant turn is a known call is rendered, and the call's
//! JSON object is found in the output — the text around it, its name and arguments
//! keys are the model's own tool syntax. Templates that ignore tools get a documented
//! fallback: the tools described in a system message, a call written as a bare
//! `{"name": …, "arguments": …}`.

use super::{Message, Tokenizer};
use crate::error::{Error, Result};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Map, Value};

/// A tool the model may call: `{ type: "function", function: { name, description,
/// parameters } }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    pub function: FunctionDef,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema of the arguments (an object with no properties when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

/// A call the model made (or made in an earlier turn).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// An object (OpenAI sends it as a JSON string; templates want the object).
    #[serde(default, deserialize_with = "json_or_text")]
    pub arguments: Value,
}

fn function() -> String {
    "function".into()
}

/// A JSON text is parsed; anything else is kept as it is.
fn json_or_text<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Value, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        v => v,
    })
}

impl Tool {
    pub fn name(&self) -> &str {
        &self.function.name
    }

    /// The arguments' schema (an empty object's when the tool declares none).
    pub fn parameters(&self) -> Value {
        self.function
            .parameters
            .clone()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}))
    }
}

/// Checks a request's tools: functions, each named, no name twice.
pub fn check_tools(tools: &[Tool]) -> Result<()> {
    for (i, t) in tools.iter().enumerate() {
        if t.kind != "function" {
            return Err(Error::invalid(format!(
                "tool {i} has type {:?}: only \"function\" tools are supported",
                t.kind
            )));
        }
        if t.name().is_empty() {
            return Err(Error::invalid(format!("tool {i} has no function name")));
        }
        if tools[..i].iter().any(|u| u.name() == t.name()) {
            return Err(Error::invalid(format!(
                "two tools are named {:?}",
                t.name()
            )));
        }
        if let Some(p) = &t.function.parameters {
            if !p.is_object() {
                return Err(Error::invalid(format!(
                    "tool {:?}: parameters must be a JSON Schema object",
                    t.name()
                )));
            }
        }
    }
    Ok(())
}

/// How a model writes a tool call, after the generation prompt:
/// `before` `{ "<name_key>": name, "<args_key>": {…} }` `after`. An answer in words is
/// written `answer_prefix` + text (Qwen3's template puts an empty think block there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSyntax {
    pub before: String,
    pub after: String,
    pub name_key: String,
    pub args_key: String,
    pub answer_prefix: String,
    /// The template renders the tools itself; otherwise they are described in a
    /// system message (`fallback_messages`).
    pub native: bool,
}

impl ToolSyntax {
    /// The syntax of templates that know no tools.
    pub fn fallback() -> ToolSyntax {
        ToolSyntax {
            before: String::new(),
            after: String::new(),
            name_key: "name".into(),
            args_key: "arguments".into(),
            answer_prefix: String::new(),
            native: false,
        }
    }

    /// A finished reply's call, when it is one (`text` as generated).
    pub fn parse_call(&self, text: &str) -> Option<(String, Value)> {
        let rest = text.strip_prefix(self.before.as_str())?;
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let obj = values.next()?.ok()?;
        let name = obj.get(&self.name_key)?.as_str()?.to_string();
        let args = match obj.get(&self.args_key) {
            Some(Value::String(s)) => serde_json::from_str(s).ok()?,
            Some(v) => v.clone(),
            None => json!({}),
        };
        let tail = &rest[values.byte_offset()..];
        (tail.trim() == self.after.trim()).then_some((name, args))
    }
}

const PROBE_QUESTION: &str = "Pippin probe question";
const PROBE_ANSWER: &str = "Pippin probe answer";
const PROBE_TOOL: &str = "pippin_probe_tool";

fn probe_args() -> Value {
    json!({"pippin_probe_argument": "pippin probe value"})
}

fn probe_tool() -> Tool {
    Tool {
        kind: function(),
        function: FunctionDef {
            name: PROBE_TOOL.into(),
            description: Some("A probe.".into()),
            parameters: Some(json!({
                "type": "object",
                "properties": {"pippin_probe_argument": {"type": "string"}},
                "required": ["pippin_probe_argument"]
            })),
        },
    }
}

impl Tokenizer {
    /// How this model's template writes tool calls (the fallback when it ignores
    /// tools, has no template, or writes calls in a shape not found by the probe).
    /// Probed once per tokenizer (four renders of the template).
    pub fn tool_syntax(&self) -> ToolSyntax {
        self.tool_syntax
            .get_or_init(|| self.probe_tools().unwrap_or_else(ToolSyntax::fallback))
            .clone()
    }

    fn probe_tools(&self) -> Option<ToolSyntax> {
        let t = self.template().ok()?;
        let tools = [probe_tool()];
        let user = Message::new("user", PROBE_QUESTION);
        let base = t.render(std::slice::from_ref(&user), &tools, true).ok()?;
        let without = t.render(std::slice::from_ref(&user), &[], true).ok()?;
        if base == without {
            return None;
        }
        let call = Message {
            tool_calls: vec![ToolCall {
                id: Some("call_pippin_probe".into()),
                kind: function(),
                function: FunctionCall {
                    name: PROBE_TOOL.into(),
                    arguments: probe_args(),
                },
            }],
            ..Message::new("assistant", "")
        };
        let answer = Message::new("assistant", PROBE_ANSWER);
        let called = t.render(&[user.clone(), call], &tools, false).ok()?;
        let answered = t.render(&[user, answer], &tools, false).ok()?;
        let called = called.strip_prefix(&base)?;
        let (answer_prefix, end_of_turn) =
            answered.strip_prefix(&base)?.split_once(PROBE_ANSWER)?;
        let (start, end, obj) = call_object(called)?;
        let key_of = |want: &dyn Fn(&Value) -> bool| {
            obj.iter()
                .find(|(_, v)| want(v))
                .map(|(k, _)| k.to_string())
        };
        let name_key = key_of(&|v| v == PROBE_TOOL)?;
        let args_key = key_of(&|v| {
            *v == probe_args()
                || v.as_str()
                    .and_then(|s| serde_json::from_str::<Value>(s).ok())
                    .is_some_and(|p| p == probe_args())
        })?;
        let tail = &called[end..];
        let after = tail
            .strip_suffix(end_of_turn)
            .unwrap_or_else(|| tail.trim_end());
        Some(ToolSyntax {
            before: called[..start].to_string(),
            after: after.to_string(),
            name_key,
            args_key,
            answer_prefix: answer_prefix.to_string(),
            native: true,
        })
    }
}

/// The first JSON object in `text` that names the probe tool directly: its start,
/// end and members.
fn call_object(text: &str) -> Option<(usize, usize, Map<String, Value>)> {
    text.match_indices('{').find_map(|(i, _)| {
        let mut values = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
        match values.next()? {
            Ok(Value::Object(m)) if m.values().any(|v| v == PROBE_TOOL) => {
                Some((i, i + values.byte_offset(), m))
            }
            _ => None,
        }
    })
}

/// The fallback for templates that know no tools: the tools described in the system
/// message (added, or appended to the conversation's own), earlier calls written as
/// the JSON the model was asked for, tool results as user turns.
pub fn fallback_messages(messages: &[Message], tools: &[Tool]) -> Vec<Message> {
    let mut out: Vec<Message> = messages
        .iter()
        .map(|m| match m.role.as_str() {
            "assistant" if !m.tool_calls.is_empty() => {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| json!({"name": c.function.name, "arguments": c.function.arguments}))
                    .collect();
                let text = match calls.as_slice() {
                    [one] => one.to_string(),
                    many => Value::from(many.to_vec()).to_string(),
                };
                Message::new("assistant", &text)
            }
            "tool" => {
                let id = m
                    .tool_call_id
                    .as_deref()
                    .map(|i| format!(" ({i})"))
                    .unwrap_or_default();
                Message::new("user", &format!("Tool result{id}: {}", m.content))
            }
            _ => Message::new(&m.role, &m.content),
        })
        .collect();
    if tools.is_empty() {
        return out;
    }
    let prompt = fallback_prompt(tools);
    match out.first_mut() {
        Some(first) if first.role == "system" => {
            first.content = format!("{}\n\n{prompt}", first.content);
        }
        _ => out.insert(0, Message::new("system", &prompt)),
    }
    out
}

/// The system message that describes `tools` to a model whose template cannot.
pub fn fallback_prompt(tools: &[Tool]) -> String {
    let list: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name(),
                "description": t.function.description.clone().unwrap_or_default(),
                "parameters": t.parameters(),
            })
        })
        .collect();
    format!(
        "You can call these tools:\n{}\nTo call a tool, reply with only a JSON object {{\"name\": <tool name>, \"arguments\": <arguments object>}}.",
        Value::from(list)
    )
}
