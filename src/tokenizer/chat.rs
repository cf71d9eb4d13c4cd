//! Chat templates: the model's own Jinja template (`tokenizer.chat_template`) rendered
//! by minijinja with Python-compatible methods, as Hugging Face renders it
//! (trim_blocks and lstrip_blocks on). A template comes from the model file, so it is
//! untrusted code: it runs on a budget of instructions, recursion and output, and a
//! hostile one fails with an error instead of hanging the page. (Not bounded: the
//! memory of values a template builds without printing them, e.g. a string doubled
//! in a loop; minijinja offers no hook for that.)

use crate::error::{Error, Result};
use minijinja::{context, Environment, ErrorKind};
use std::io::Write;

/// Template instructions one render may execute: real templates take a few thousand
/// per message; a nested-loop bomb runs out in milliseconds.
pub const FUEL: u64 = 2_000_000;
/// Deepest nesting of loops, calls and includes.
const RECURSION: usize = 64;
/// Most bytes a rendered prompt may have (far more than any model's context).
pub const MAX_OUTPUT: usize = 8 << 20;
use super::tools::{Tool, ToolCall};
use serde::{Deserialize, Deserializer, Serialize};

/// One turn of a conversation, in OpenAI's shape: `content` may also be `null` or a
/// list of text parts; an assistant turn may carry `tool_calls`, a `tool` turn the
/// id of the call it answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default, deserialize_with = "content_text")]
    pub content: String,
    /// Absent (not empty) when there are none: templates test `'tool_calls' in message`.
    #[serde(
        default,
        deserialize_with = "list_or_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A list, `null` (Python's `model_dump()` writes it) being empty.
fn list_or_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// A message's content as text: a string, `null`, or OpenAI's `[{type: "text", text}]`.
fn content_text<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    use serde::de::Error as _;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(String::new()),
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Array(parts) => parts
            .iter()
            .map(|p| match (p["type"].as_str(), p["text"].as_str()) {
                (Some("text"), Some(t)) => Ok(t),
                _ => Err(D::Error::custom(format!(
                    "content parts of type {} are not supported (text only)",
                    p["type"]
                ))),
            })
            .collect(),
        _ => Err(D::Error::custom(
            "content must be a string or a list of text parts",
        )),
    }
}

pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

fn template_err(e: minijinja::Error) -> Error {
    // minijinja's alternate form includes the template line that failed.
    Error::Template(format!("{e:#}"))
}

impl ChatTemplate {
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<(), minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(template_err)?;
        Ok(ChatTemplate {
            env,
            bos: bos.into(),
            eos: eos.into(),
        })
    }

    /// The prompt for `messages`; `tools` (none: `[]`) reach the template as
    /// Hugging Face passes them, `none` when there are none (Llama 3.x tests
    /// `tools is not none`).
    pub fn render(
        &self,
        messages: &[Message],
        tools: &[Tool],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let tmpl = self.env.get_template("chat").map_err(template_err)?;
        let mut out = Bounded(Vec::new());
        let ctx = context! {
            messages => messages,
            tools => (!tools.is_empty()).then_some(tools),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos,
            eos_token => self.eos,
        };
        tmpl.render_captured_to(ctx, &mut out)
            .map_err(template_err)?;
        String::from_utf8(out.0).map_err(|_| Error::Template("the output is not UTF-8".into()))
    }
}

/// Output that refuses to grow past MAX_OUTPUT.
struct Bounded(Vec<u8>);

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_OUTPUT {
            return Err(std::io::Error::other(format!(
                "the rendered prompt is over {} MiB",
                MAX_OUTPUT >> 20
            )));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `tojson` as Hugging Face's template environment defines it (Python's `json.dumps`,
/// non-ASCII kept): `", "` and `": "` between items, or `indent`; keys in their order
/// unless `sort_keys`. (minijinja's own is compact and HTML-escapes `<`, `>`, `&`, `'`:
/// not the text the model was trained on.)
fn tojson(
    value: minijinja::Value,
    indent: Option<usize>,
    kwargs: minijinja::value::Kwargs,
) -> Result<String, minijinja::Error> {
    let indent = indent.or(kwargs.get::<Option<usize>>("indent")?);
    let sort = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let seps = kwargs.get::<Option<Vec<String>>>("separators")?;
    kwargs.assert_all_used()?;
    let (item, key) = match seps.as_deref() {
        Some([i, k]) => (i.clone(), k.clone()),
        Some(_) => {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators is (item separator, key separator)",
            ))
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let bad = |e: serde_json::Error| {
        minijinja::Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON")
            .with_source(e)
    };
    let mut v = serde_json::to_value(&value).map_err(bad)?;
    if sort {
        sort_keys(&mut v);
    }
    let mut out = Vec::new();
    let written = match indent {
        Some(n) if seps.is_none() => {
            let pad = " ".repeat(n);
            let f = serde_json::ser::PrettyFormatter::with_indent(pad.as_bytes());
            v.serialize(&mut serde_json::Serializer::with_formatter(&mut out, f))
        }
        _ => {
            let f = PyFormatter { item, key };
            v.serialize(&mut serde_json::Serializer::with_formatter(&mut out, f))
        }
    };
    written.map_err(bad)?;
    let text = String::from_utf8_lossy(&out).into_owned();
    Ok(if ascii { ascii_escaped(&text) } else { text })
}

/// Non-ASCII characters as `\uXXXX` escapes (UTF-16, as Python writes them); in JSON
/// text they only occur inside strings.
fn ascii_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            for u in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

fn sort_keys(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.sort_keys();
            m.values_mut().for_each(sort_keys);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(sort_keys),
        _ => {}
    }
}

/// JSON on one line with Python's separators (default `", "` and `": "`).
struct PyFormatter {
    item: String,
    key: String,
}

impl PyFormatter {
    fn separate<W: ?Sized + Write>(&self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(self.item.as_bytes())
        }
    }
}

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.separate(w, first)
    }
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.separate(w, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(self.key.as_bytes())
    }
}

/// Today's date for templates that print it (Llama 3.x). Supports the formats those
/// templates use: %d %b %Y %m %B.
fn strftime_now(fmt: String) -> String {
    let secs = web_time_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month = MONTHS[(m - 1) as usize];
    fmt.replace("%d", &format!("{d:02}"))
        .replace("%m", &format!("{m:02}"))
        .replace("%Y", &y.to_string())
        .replace("%B", month)
        .replace("%b", &month[..3])
}

/// Seconds since 1970 from the system clock, or in the browser JavaScript's
/// `Date.now()` (std's clock is not there on wasm32; `web_time` bridges it).
fn web_time_secs() -> u64 {
    web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + (m <= 2) as i64, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }

    #[test]
    fn raise_exception_is_an_error() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        let e = t.render(&[], &[], false).unwrap_err().to_string();
        assert!(e.contains("no system role"), "{e}");
    }

    #[test]
    fn hostile_templates_fail_within_a_bound() {
        let bombs = [
            // Nested loops: 10^15 iterations.
            "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}x{% endfor %}{% endfor %}{% endfor %}",
            // Unbounded recursion through a macro.
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            // Output without end.
            "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
            // One huge string.
            "{{ 'x' * 50000000 }}",
        ];
        for src in bombs {
            let t = web_time::Instant::now();
            let e = ChatTemplate::new(src, "", "")
                .and_then(|tpl| tpl.render(&[Message::new("user", "hi")], &[], true))
                .unwrap_err();
            let secs = t.elapsed().as_secs_f64();
            assert!(secs < 5.0, "{src}: took {secs} s");
            assert!(matches!(e, Error::Template(_)), "{src}: {e}");
        }
    }

    /// As Python's `json.dumps` (ensure_ascii off) writes it, as Hugging Face renders.
    #[test]
    fn tojson_writes_what_python_writes() {
        let render = |src: &str| {
            let t = ChatTemplate::new(src, "", "").unwrap();
            t.render(&[], &[], false).unwrap()
        };
        let v = "{'b': 1, 'a': [1.5, 'x<y & \\'z\\'', none, true], 'é': {}}";
        assert_eq!(
            render(&format!("{{{{ {v} | tojson }}}}")),
            r#"{"b": 1, "a": [1.5, "x<y & 'z'", null, true], "é": {}}"#
        );
        assert_eq!(
            render("{{ {'b': [1], 'a': 2} | tojson(indent=2) }}"),
            "{\n  \"b\": [\n    1\n  ],\n  \"a\": 2\n}"
        );
        assert_eq!(
            render("{{ {'b': {'d': 1, 'c': 2}, 'a': 2} | tojson(sort_keys=true) }}"),
            r#"{"a": 2, "b": {"c": 2, "d": 1}}"#
        );
        assert_eq!(
            render("{{ {'a': 'é😀', 'b': [1, 2]} | tojson(ensure_ascii=true, separators=(',', ':')) }}"),
            r#"{"a":"\u00e9\ud83d\ude00","b":[1,2]}"#
        );
    }

    #[test]
    fn today_is_not_1970() {
        let t = ChatTemplate::new("{{ strftime_now('%Y') }}", "", "").unwrap();
        let year: i32 = t.render(&[], &[], false).unwrap().parse().unwrap();
        assert!(year >= 2025, "{year}");
    }

    #[test]
    fn python_string_methods_work() {
        let t = ChatTemplate::new("{{ messages[0].content.strip().upper() }}", "", "").unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "  hi ")], &[], false)
                .unwrap(),
            "HI"
        );
    }
}
