//! A JavaScript `ReadableStream<Uint8Array>` as the engine's byte source.

use crate::engine::ByteSource;
use crate::error::{Error, Result};
use crate::gguf::split::Shards;
use wasm_bindgen::JsCast;

/// The model's streams: one file's, or a split model's files' in order, with their
/// sizes where known (js/index.js passes arrays, a number or undefined each).
pub fn files(streams: js_sys::Array, totals: js_sys::Array) -> Shards<JsStream> {
    let size = |k| totals.get(k).as_f64().map(|t| t as u64);
    Shards(
        (0..streams.length())
            .map(|k| JsStream::new(streams.get(k).unchecked_into(), size(k)))
            .collect(),
    )
}

pub struct JsStream {
    reader: web_sys::ReadableStreamDefaultReader,
    total: Option<u64>,
}

impl JsStream {
    pub fn new(stream: web_sys::ReadableStream, total: Option<u64>) -> Self {
        let reader = stream.get_reader().unchecked_into();
        JsStream { reader, total }
    }
}

/// A stream's error as text: an `Error`'s message, a thrown string, or whatever
/// JavaScript says the value is (streams may reject with anything).
fn describe(e: wasm_bindgen::JsValue) -> Error {
    let msg = match e.dyn_ref::<js_sys::Error>() {
        Some(err) => String::from(err.message()),
        None => e.as_string().unwrap_or_else(|| format!("{e:?}")),
    };
    Error::Download(format!("reading the model failed: {msg}"))
}

impl ByteSource for JsStream {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let r = wasm_bindgen_futures::JsFuture::from(self.reader.read())
            .await
            .map_err(describe)?;
        let done = js_sys::Reflect::get(&r, &"done".into()).map_err(describe)?;
        if done.as_bool().unwrap_or(false) {
            return Ok(None);
        }
        let value = js_sys::Reflect::get(&r, &"value".into()).map_err(describe)?;
        let bytes: js_sys::Uint8Array = value
            .dyn_into()
            .map_err(|_| Error::invalid("the model stream must yield Uint8Array chunks"))?;
        Ok(Some(bytes.to_vec()))
    }

    fn total_len(&self) -> Option<u64> {
        self.total
    }
}
