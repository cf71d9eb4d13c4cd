//! In the browser the compiler is a second wasm module (`guided/wasm`, shipped as
//! `pippin_guided.js` + `pippin_guided_bg.wasm`): the package's JavaScript registers a
//! loader (`setGuidedLoader`), called on the first guided reply; its `Grammars` and
//! `Guide` objects are driven from here through JavaScript. A mask crosses once per
//! token (~6 KB for a 49k vocabulary), next to a model step of milliseconds.

use super::{allows, vocabulary, ResponseFormat};
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    /// The guided module's exports, initialized.
    #[derive(Clone)]
    type Module;
    #[wasm_bindgen(method, catch)]
    fn grammars(
        this: &Module,
        bytes: &[u8],
        ends: &[u32],
        eos: u32,
        stops: &[u32],
    ) -> std::result::Result<Compiled, JsValue>;

    /// A vocabulary compiled in the guided module (its `Grammars`).
    type Compiled;
    #[wasm_bindgen(method, catch)]
    fn guide(this: &Compiled, format: &str) -> std::result::Result<JsValue, JsValue>;
    // `free` throws if the module trapped (an llguidance panic): caught, not let
    // through the engine's Drop.
    #[wasm_bindgen(method, catch, js_name = free)]
    fn free_compiled(this: &Compiled) -> std::result::Result<(), JsValue>;

    /// One reply's parser in the guided module (its `Guide`).
    type Parser;
    #[wasm_bindgen(method, catch)]
    fn consume(this: &Parser, token: u32) -> std::result::Result<bool, JsValue>;
    #[wasm_bindgen(method, catch)]
    fn update(this: &Parser) -> std::result::Result<(), JsValue>;
    #[wasm_bindgen(method)]
    fn mask(this: &Parser) -> Vec<u32>;
    #[wasm_bindgen(method, catch, js_name = free)]
    fn free_parser(this: &Parser) -> std::result::Result<(), JsValue>;
}

thread_local! {
    static LOADER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
    static MODULE: RefCell<Option<Module>> = const { RefCell::new(None) };
}

/// Sets how the guided module is loaded: `load()` returns a promise of its exports.
pub fn set_loader(load: js_sys::Function) {
    LOADER.with(|l| *l.borrow_mut() = Some(load));
}

/// The guided module, loaded on first use. A failed load is tried again next time.
async fn module() -> Result<Module> {
    if let Some(m) = MODULE.with(|m| m.borrow().clone()) {
        return Ok(m);
    }
    let failed = |e: JsValue| {
        Error::Download(format!(
            "loading Pippin's guided-generation module (pippin_guided_bg.wasm, see guidedWasmUrl) failed: {}",
            message(&e)
        ))
    };
    let load = LOADER.with(|l| l.borrow().clone()).ok_or_else(|| {
        Error::Invalid(
            "guided generation needs Pippin's guided module, and no loader was set".into(),
        )
    })?;
    let promise = load.call0(&JsValue::NULL).map_err(failed)?;
    let exports = JsFuture::from(js_sys::Promise::resolve(&promise))
        .await
        .map_err(failed)?;
    let m: Module = exports.unchecked_into();
    MODULE.with(|s| *s.borrow_mut() = Some(m.clone()));
    Ok(m)
}

/// A thrown JavaScript value's message.
fn message(e: &JsValue) -> String {
    match e.dyn_ref::<js_sys::Error>() {
        Some(e) => e.message().into(),
        None => e.as_string().unwrap_or_else(|| format!("{e:?}")),
    }
}

fn grammar_err(e: JsValue) -> Error {
    Error::Grammar(message(&e))
}

/// Frees the guided module's copy when the engine drops its cache.
struct Vocabulary(Compiled);

impl Drop for Vocabulary {
    fn drop(&mut self) {
        // Nothing to do if the module cannot free it: it is unusable already.
        let _ = self.0.free_compiled();
    }
}

/// One model's compiled vocabulary, built on the first guided reply and kept.
#[derive(Default)]
pub struct GrammarCache(RefCell<Option<Rc<Vocabulary>>>);

impl GrammarCache {
    /// A guide for a reply of shape `format` (`None`: plain text, nothing compiled or
    /// loaded). An invalid schema, regex or grammar, or one no text satisfies, is an
    /// error here; so is a guided module that cannot be loaded.
    pub async fn guide(&self, tk: &Tokenizer, format: &ResponseFormat) -> Result<Option<Guide>> {
        if *format == ResponseFormat::Text {
            return Ok(None);
        }
        let cached = self.0.borrow().clone();
        let vocab = match cached {
            Some(v) => v,
            None => {
                let m = module().await?;
                let v = Rc::new(compile(&m, tk)?);
                *self.0.borrow_mut() = Some(v.clone());
                v
            }
        };
        let format = serde_json::to_string(format).map_err(|e| Error::Grammar(e.to_string()))?;
        let parser = vocab.0.guide(&format).map_err(grammar_err)?;
        if parser.is_undefined() || parser.is_null() {
            return Ok(None);
        }
        let parser: Parser = parser.unchecked_into();
        let mask = parser.mask();
        Ok(Some(Guide {
            parser,
            mask,
            stale: false,
        }))
    }
}

/// The tokenizer's vocabulary compiled in the guided module: every token's bytes in
/// one array with their end offsets (one copy across, not one per token).
fn compile(m: &Module, tk: &Tokenizer) -> Result<Vocabulary> {
    let (tokens, eos) = vocabulary(tk)?;
    let mut bytes = Vec::with_capacity(tokens.iter().map(Vec::len).sum());
    let mut ends = Vec::with_capacity(tokens.len());
    for t in &tokens {
        bytes.extend_from_slice(t);
        let end = u32::try_from(bytes.len())
            .map_err(|_| Error::Grammar("the vocabulary is too large".into()))?;
        ends.push(end);
    }
    let compiled = m
        .grammars(&bytes, &ends, eos, tk.stop_tokens())
        .map_err(grammar_err)?;
    Ok(Vocabulary(compiled))
}

/// One reply's parser state and the tokens allowed next (a copy of the guided
/// module's mask, read where the native `Guide` reads its own).
pub struct Guide {
    parser: Parser,
    /// Bit `t % 32` of word `t / 32`: token `t` is allowed next.
    mask: Vec<u32>,
    /// The parser moved past the position `mask` is for.
    stale: bool,
}

impl Guide {
    /// The tokens allowed next, as bits (see `allows`).
    pub fn mask(&self) -> &[u32] {
        &self.mask
    }

    pub fn allows(&self, token: u32) -> bool {
        allows(&self.mask, token)
    }

    /// Advances past `token` without computing the next mask yet (`update` does).
    pub fn consume(&mut self, token: u32) -> Result<bool> {
        let complete = self.parser.consume(token).map_err(grammar_err)?;
        self.stale = !complete;
        Ok(complete)
    }

    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Computes the mask for the next token (when it is stale).
    pub fn update(&mut self) -> Result<()> {
        if self.stale {
            self.parser.update().map_err(grammar_err)?;
            self.mask = self.parser.mask();
            self.stale = false;
        }
        Ok(())
    }
}

impl Drop for Guide {
    fn drop(&mut self) {
        let _ = self.parser.free_parser();
    }
}
