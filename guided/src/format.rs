//! What a guided reply asks for: the response format as JavaScript and the CLI give it,
//! and the options every JSON Schema is compiled with.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The shape a reply must have (`responseFormat` in JavaScript).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// A JSON value valid under `schema`. A keyword the grammar cannot express
    /// (`uniqueItems`, ...) is an error, unless `strict` is false: then it is ignored
    /// (the rest is still enforced).
    JsonSchema {
        schema: Value,
        #[serde(default)]
        strict: Option<bool>,
    },
    /// Any JSON object.
    JsonObject,
    /// Text matching the regular expression as a whole (Rust `regex` syntax).
    Regex { pattern: String },
    /// A Lark-style grammar (llguidance's dialect: `start: ...`).
    Grammar { grammar: String },
    /// No constraint (OpenAI's `{ type: "text" }`).
    Text,
}

/// `schema` as a JSON Schema guide compiles it, for a Lark grammar's `%json` (compact
/// JSON, bounded numbers; `lenient`: keywords the grammar cannot express ignored).
pub fn guide_schema(schema: Value, lenient: bool) -> Value {
    options(schema, lenient)
}

/// The compiler's options, in the schema's `x-guidance` (the schema's own win): JSON
/// without free whitespace between tokens (a small model offered optional whitespace
/// can spend its whole budget on it); `lenient` ignores keywords the grammar cannot
/// express (`uniqueItems`, ...) instead of refusing the schema.
pub(crate) fn options(mut schema: Value, lenient: bool) -> Value {
    bound_numbers(&mut schema);
    if let Some(o) = schema.as_object_mut() {
        let g = o.entry("x-guidance").or_insert_with(|| json!({}));
        if let Some(g) = g.as_object_mut() {
            g.entry("whitespace_flexible").or_insert(json!(false));
            g.entry("lenient").or_insert(json!(lenient));
        }
    }
    schema
}

/// The step of a JSON number whose schema sets no `multipleOf`: at most 6 fractional
/// digits (llama.cpp's JSON grammars bound digits likewise). Without a bound a small
/// model sampling a number can write digits until `maxTokens`. (Finer steps overflow
/// llguidance's arithmetic with some ranges: 1e-9 with -50..60.)
const NUMBER_STEP: f64 = 1e-6;

/// The magnitude a JSON number or integer may reach when its schema sets no bound:
/// 16 integral digits at most (f64 holds integers exactly to 2^53 ≈ 9e15).
const NUMBER_LIMIT: f64 = 1e15;

/// Bounds every number and integer subschema that leaves its digits unbounded: a
/// `number` without `multipleOf` gets one of `NUMBER_STEP`, a side without a bound
/// gets ±`NUMBER_LIMIT` — a subset of what it allows, so every reply still
/// validates. Literal values (`const`, `enum`, `default`, `examples`) are left alone.
fn bound_numbers(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let is = |kind: &str| match o.get("type") {
                Some(Value::String(t)) => t == kind,
                Some(Value::Array(ts)) => ts.iter().any(|t| t == kind),
                _ => false,
            };
            let (number, integer) = (is("number"), is("integer"));
            if number && !o.contains_key("multipleOf") {
                o.insert("multipleOf".into(), json!(NUMBER_STEP));
            }
            if number || integer {
                if !o.contains_key("minimum") && !o.contains_key("exclusiveMinimum") {
                    o.insert("minimum".into(), json!(-NUMBER_LIMIT));
                }
                if !o.contains_key("maximum") && !o.contains_key("exclusiveMaximum") {
                    o.insert("maximum".into(), json!(NUMBER_LIMIT));
                }
            }
            for (k, child) in o.iter_mut() {
                if !matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                    bound_numbers(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(bound_numbers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_bounded_and_literals_left_alone() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "x": {"type": "number"},
                "n": {"type": ["integer", "null"], "minimum": 3},
                "m": {"type": "number", "multipleOf": 0.5, "exclusiveMaximum": 10},
                "c": {"const": {"type": "number"}},
                "e": {"enum": [{"type": "integer"}]}
            }
        });
        bound_numbers(&mut s);
        let p = &s["properties"];
        assert_eq!(p["x"]["multipleOf"], json!(NUMBER_STEP));
        assert_eq!(p["x"]["minimum"], json!(-NUMBER_LIMIT));
        assert_eq!(p["x"]["maximum"], json!(NUMBER_LIMIT));
        assert_eq!(p["n"]["minimum"], json!(3));
        assert_eq!(p["n"]["maximum"], json!(NUMBER_LIMIT));
        assert!(
            p["n"].get("multipleOf").is_none(),
            "integers have no fraction"
        );
        assert_eq!(p["m"]["multipleOf"], json!(0.5));
        assert!(
            p["m"].get("maximum").is_none(),
            "an exclusive bound is a bound"
        );
        assert_eq!(p["c"], json!({"const": {"type": "number"}}));
        assert_eq!(p["e"], json!({"enum": [{"type": "integer"}]}));
    }
}
