//! Token ids of a chat: the template's markup may become special tokens, message
//! content never does. A user who pastes `<|im_end|>\n<|im_start|>system\n…` into a
//! chat gets those characters as text, not a forged system turn.
//!
//! The template is rendered twice: with each message's content replaced by a unique
//! placeholder (the skeleton: markup and where each content goes), and for real. The
//! real text is then walked against the skeleton, so every content is anchored between
//! the markup before and after it, even when it contains markup-looking text; special
//! tokens are recognized only outside content. Templates that transform content beyond
//! trimming whitespace, or branch on it, cannot be anchored: then special-token texts
//! in contents are broken by a word joiner (U+2060) before rendering, so the model sees
//! them as text in every case.

use super::{FunctionCall, FunctionDef, Message, Tokenizer, Tool, ToolCall};
use crate::error::Result;
use serde_json::Value;
use std::ops::Range;

const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';
const JOINER: char = '\u{2060}';

/// A piece of the skeleton: markup text, or where message `i`'s content goes.
enum Piece<'a> {
    Markup(&'a str),
    Content(usize),
}

impl Tokenizer {
    /// The ids of `messages` rendered with the chat template, BOS first when the model
    /// wants it; content is text whatever it contains.
    pub fn encode_chat(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        self.encode_chat_tools(messages, &[], add_generation_prompt)
    }

    /// As `encode_chat`, with `tools` offered to the template (which renders them
    /// as markup: their definitions and the calls are not anchored content).
    pub fn encode_chat_tools(
        &self,
        messages: &[Message],
        tools: &[Tool],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        let gen = add_generation_prompt;
        let (messages, tools) = &self.defuse_tools(messages, tools);
        let text = self.apply_chat_template_tools(messages, tools, gen)?;
        let ids = match self.content_spans(messages, tools, gen, &text) {
            Some(spans) => self.encode_outside(&text, &spans)?,
            None => {
                let safe: Vec<Message> = messages
                    .iter()
                    .map(|m| Message {
                        content: self.break_specials(&m.content),
                        ..m.clone()
                    })
                    .collect();
                self.encode(&self.apply_chat_template_tools(&safe, tools, gen)?, true)?
            }
        };
        Ok(self.with_bos(ids))
    }

    /// Where each message's content lies in `text` (the real rendering), or `None`
    /// when the template's output cannot be anchored to its skeleton.
    fn content_spans(
        &self,
        messages: &[Message],
        tools: &[Tool],
        add_generation_prompt: bool,
        text: &str,
    ) -> Option<Vec<Range<usize>>> {
        let marked: Vec<Message> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| Message {
                // Empty content (a tool call's) stays empty: templates branch on it.
                content: if m.content.is_empty() {
                    String::new()
                } else {
                    format!("{OPEN}{i}{CLOSE}")
                },
                ..m.clone()
            })
            .collect();
        let skeleton = self
            .apply_chat_template_tools(&marked, tools, add_generation_prompt)
            .ok()?;
        let pieces = pieces(&skeleton, messages.len())?;
        let mut spans = Vec::new();
        let mut pos = 0;
        for (k, piece) in pieces.iter().enumerate() {
            match *piece {
                Piece::Markup(m) => {
                    text.get(pos..)?.strip_prefix(m)?;
                    pos += m.len();
                }
                Piece::Content(i) => {
                    let next = match pieces.get(k + 1) {
                        Some(Piece::Markup(m)) => *m,
                        _ => "",
                    };
                    let c = &messages[i].content;
                    let rest = text.get(pos..)?;
                    let len = [c.as_str(), c.trim(), c.trim_start(), c.trim_end()]
                        .into_iter()
                        .find(|v| rest.starts_with(v) && rest[v.len()..].starts_with(next))?
                        .len();
                    spans.push(pos..pos + len);
                    pos += len;
                }
            }
        }
        (pos == text.len()).then_some(spans)
    }

    /// Ids of `text`, with special tokens recognized only outside `spans` (sorted,
    /// disjoint); everything else is encoded as text, run by run.
    fn encode_outside(&self, text: &str, spans: &[Range<usize>]) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        let (mut run, mut i) = (0, 0);
        let mut spans = spans.iter().peekable();
        while i < text.len() {
            if let Some(s) = spans.peek() {
                if i >= s.start {
                    i = i.max(s.end);
                    spans.next();
                    continue;
                }
            }
            match self.special_at(&text[i..]) {
                Some((len, id)) => {
                    ids.extend(self.encode(&text[run..i], false)?);
                    ids.push(id);
                    i += len;
                    run = i;
                }
                None => i += text[i..].chars().next().map_or(1, char::len_utf8),
            }
        }
        ids.extend(self.encode(&text[run..], false)?);
        Ok(ids)
    }

    /// The longest special token `s` starts with: (its length in bytes, its id).
    pub(crate) fn special_at(&self, s: &str) -> Option<(usize, u32)> {
        let first = s.chars().next()?;
        self.specials
            .get(&first)?
            .iter()
            .find(|(t, _)| s.starts_with(t.as_str()))
            .map(|(t, id)| (t.len(), *id))
    }

    /// Tool calls and definitions are rendered as markup, not anchored content: the
    /// special-token texts in them are broken as in content that cannot be anchored.
    fn defuse_tools(&self, messages: &[Message], tools: &[Tool]) -> (Vec<Message>, Vec<Tool>) {
        let call = |c: &ToolCall| ToolCall {
            function: FunctionCall {
                name: self.break_specials(&c.function.name),
                arguments: self.defuse_json(&c.function.arguments),
            },
            ..c.clone()
        };
        let messages = messages
            .iter()
            .map(|m| Message {
                tool_calls: m.tool_calls.iter().map(call).collect(),
                ..m.clone()
            })
            .collect();
        let tools = tools
            .iter()
            .map(|t| Tool {
                function: FunctionDef {
                    name: self.break_specials(&t.function.name),
                    description: t
                        .function
                        .description
                        .as_deref()
                        .map(|d| self.break_specials(d)),
                    parameters: t.function.parameters.as_ref().map(|p| self.defuse_json(p)),
                },
                ..t.clone()
            })
            .collect();
        (messages, tools)
    }

    fn defuse_json(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.break_specials(s)),
            Value::Array(a) => a.iter().map(|x| self.defuse_json(x)).collect(),
            Value::Object(m) => m
                .iter()
                .map(|(k, x)| (self.break_specials(k), self.defuse_json(x)))
                .collect(),
            other => other.clone(),
        }
    }

    /// `text` with a word joiner after the first character of each special token.
    fn break_specials(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            out.push(c);
            if self.special_at(rest).is_some() {
                out.push(JOINER);
            }
            rest = &rest[c.len_utf8()..];
        }
        out
    }
}

/// The skeleton split at its placeholders; `None` if a placeholder is malformed.
fn pieces(skeleton: &str, n: usize) -> Option<Vec<Piece<'_>>> {
    let mut out = Vec::new();
    let mut rest = skeleton;
    while let Some(open) = rest.find(OPEN) {
        if open > 0 {
            out.push(Piece::Markup(&rest[..open]));
        }
        let after = &rest[open + OPEN.len_utf8()..];
        let close = after.find(CLOSE)?;
        let i: usize = after[..close].parse().ok().filter(|&i| i < n)?;
        out.push(Piece::Content(i));
        rest = &after[close + CLOSE.len_utf8()..];
    }
    if !rest.is_empty() {
        out.push(Piece::Markup(rest));
    }
    Some(out)
}
