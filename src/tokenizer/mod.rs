//! Text ↔ token ids with the `tokenizers` crate, built from the GGUF's own metadata or
//! from a `tokenizer.json`; chat templates; streaming detokenization.

mod bytes;
mod chat;
mod chat_ids;
mod from_gguf;
mod spm;
mod stream;
pub mod tools;
mod vocab;

pub use chat::{ChatTemplate, Message};
pub use from_gguf::SpecialIds;
pub use stream::TextStream;
pub use tools::{FunctionCall, FunctionDef, Tool, ToolCall, ToolSyntax};

use crate::error::{Error, Result};
use crate::gguf::Metadata;
use std::collections::HashMap;

/// Gemma's turn format, for Gemma files that carry no template (the 270M GGUF does
/// not): a system message opens the first user turn; the assistant is "model".
const GEMMA_TEMPLATE: &str = "{{ bos_token }}\
{%- if messages and messages[0]['role'] == 'system' -%}\
{%- set prefix = messages[0]['content'] | trim + '\n\n' -%}{%- set turns = messages[1:] -%}\
{%- else -%}{%- set prefix = '' -%}{%- set turns = messages -%}{%- endif -%}\
{%- for m in turns -%}\
{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\n' }}\
{%- if loop.first %}{{ prefix }}{% endif -%}\
{{ m['content'] | trim }}{{ '<end_of_turn>\n' }}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}";

/// Token texts that end a turn in the chat formats we know, besides the GGUF's EOS/EOT.
const END_OF_TURN: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<|end|>",
];

/// The `tokenizer.json` Pippin builds from GGUF metadata (to inspect or save it).
pub fn tokenizer_json_for(md: &Metadata) -> Result<String> {
    Ok(from_gguf::tokenizer_json(md)?.0.to_string())
}

pub struct Tokenizer {
    /// Special-token texts in the input are plain text.
    plain: tokenizers::Tokenizer,
    /// Special-token texts in the input become their ids (for rendered chat prompts).
    special: tokenizers::Tokenizer,
    pub ids: SpecialIds,
    stop: Vec<u32>,
    chat: Option<ChatTemplate>,
    /// Special-token texts by first character, longest first (chat markup).
    specials: HashMap<char, Vec<(String, u32)>>,
    /// The template's tool-call syntax, probed on first use (`tool_syntax`).
    tool_syntax: std::sync::OnceLock<ToolSyntax>,
    /// How the vocabulary spells bytes, and GPT-2's byte map: worked out on first use
    /// (`bytes_of_tokens`, once a token with log-probabilities).
    spelling: std::sync::OnceLock<bytes::Spelled>,
    /// Tokens, added ones included (the `tokenizers` crate counts them by building
    /// the whole vocabulary's map: too slow for a decode step).
    vocab: usize,
}

fn tk_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

impl Tokenizer {
    /// The tokenizer a GGUF file carries in its metadata: llama.cpp's vocabulary keys,
    /// or a whole `tokenizer.huggingface.json` (files converted from Hugging Face).
    pub fn from_gguf(md: &Metadata) -> Result<Tokenizer> {
        if md.get("tokenizer.ggml.tokens").is_none() {
            if let Some(json) = md.str("tokenizer.huggingface.json") {
                return Self::from_json(json.as_bytes(), md);
            }
        }
        let (tk, ids) = from_gguf::build(md)?;
        Self::new(tk, ids, md)
    }

    /// A `tokenizer.json` (Hugging Face format) instead of the GGUF's vocabulary; special
    /// ids and the chat template still come from the GGUF metadata.
    pub fn from_json(json: &[u8], md: &Metadata) -> Result<Tokenizer> {
        let tk = tokenizers::Tokenizer::from_bytes(json).map_err(tk_err)?;
        let ids = from_gguf::special_ids(md, tk.get_vocab_size(true));
        Self::new(tk, ids, md)
    }

    fn new(special: tokenizers::Tokenizer, ids: SpecialIds, md: &Metadata) -> Result<Tokenizer> {
        let mut plain = special.clone();
        plain.set_encode_special_tokens(true);
        let mut stop: Vec<u32> = [ids.eos, ids.eot].into_iter().flatten().collect();
        stop.extend(END_OF_TURN.iter().filter_map(|t| special.token_to_id(t)));
        stop.sort_unstable();
        stop.dedup();
        let token_text =
            |id: Option<u32>| id.and_then(|i| special.id_to_token(i)).unwrap_or_default();
        let template = md
            .str("tokenizer.chat_template")
            .or(match md.str("general.architecture") {
                Some("gemma3") => Some(GEMMA_TEMPLATE),
                _ => None,
            });
        let chat = match template {
            Some(src) => Some(ChatTemplate::new(
                src,
                &token_text(ids.bos),
                &token_text(ids.eos),
            )?),
            None => None,
        };
        let mut specials: HashMap<char, Vec<(String, u32)>> = HashMap::new();
        for (id, t) in special.get_added_tokens_decoder() {
            if let (true, Some(c)) = (t.special, t.content.chars().next()) {
                specials.entry(c).or_default().push((t.content.clone(), id));
            }
        }
        for v in specials.values_mut() {
            v.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        }
        Ok(Tokenizer {
            vocab: special.get_vocab_size(true),
            plain,
            special,
            ids,
            stop,
            chat,
            specials,
            tool_syntax: std::sync::OnceLock::new(),
            spelling: std::sync::OnceLock::new(),
        })
    }

    /// Token ids of `text`, without BOS. With `parse_special`, texts such as
    /// `<|im_start|>` become their special ids; otherwise they are ordinary text.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let tk = if parse_special {
            &self.special
        } else {
            &self.plain
        };
        Ok(tk.encode(text, false).map_err(tk_err)?.get_ids().to_vec())
    }

    /// Ids for a model input: BOS first when the model wants it and `text` does not
    /// already start with it (chat templates often write it themselves).
    pub fn encode_prompt(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        Ok(self.with_bos(self.encode(text, parse_special)?))
    }

    /// `ids` with BOS first, when the model wants it and it is not there already.
    fn with_bos(&self, mut ids: Vec<u32>) -> Vec<u32> {
        if let (true, Some(bos)) = (self.ids.add_bos, self.ids.bos) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        ids
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.special.decode(ids, skip_special).map_err(tk_err)
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    pub fn token_text(&self, id: u32) -> Option<String> {
        self.special.id_to_token(id)
    }

    /// Tokens that end generation (EOS, end of turn).
    pub fn stop_tokens(&self) -> &[u32] {
        &self.stop
    }

    /// The token that ends a text: EOS, else end of turn, else the first stop token.
    pub fn end_of_text(&self) -> Option<u32> {
        [self.ids.eos, self.ids.eot]
            .into_iter()
            .flatten()
            .chain(self.stop.first().copied())
            .next()
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }

    /// Renders `messages` with the model's chat template.
    pub fn apply_chat_template(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.apply_chat_template_tools(messages, &[], add_generation_prompt)
    }

    /// Renders `messages` with the model's chat template, `tools` offered to it.
    pub fn apply_chat_template_tools(
        &self,
        messages: &[Message],
        tools: &[Tool],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.template()?
            .render(messages, tools, add_generation_prompt)
    }

    fn template(&self) -> Result<&ChatTemplate> {
        self.chat.as_ref().ok_or_else(|| {
            Error::Template("this model has no chat template (tokenizer.chat_template)".into())
        })
    }
}
