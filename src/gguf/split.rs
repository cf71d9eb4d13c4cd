//! Models split across several GGUF files: llama.cpp's `gguf-split` and gguf-py's
//! `split_max_size` write `name-00001-of-00003.gguf`, … each a whole GGUF file. The
//! first holds the model's metadata; every one holds some of the tensors and the keys
//! `split.no` (0-based) and `split.count`. The loaders read the
//! shards' headers first (a few KB each; `gguf::read_streamed_header`), merge them
//! into one `Gguf` whose tensors name their shard (`check_first`, then `add`), then
//! stream the shards' data one after the other. (A tensor missing from every shard
//! is named by the model's loader, as in a single file.)

use super::{ByteSource, Gguf};
use crate::error::{Error, Result};

pub const SPLIT_NO: &str = "split.no";
pub const SPLIT_COUNT: &str = "split.count";

/// Most shards a model may have (gguf-split numbers them with five digits).
pub const MAX_SHARDS: usize = 99_999;

/// The files of a split model whose first file is named `name` (`…-00001-of-000NN.gguf`,
/// any directory or URL before it), in order; `None` when `name` is not a split's first.
pub fn shard_names(name: &str) -> Option<Vec<String>> {
    let stem = name.strip_suffix(".gguf")?;
    let (head, count) = stem.rsplit_once("-of-")?;
    let prefix = head.strip_suffix("-00001")?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(count) {
        return None;
    }
    let n: usize = count.parse().ok()?;
    (n >= 1).then(|| {
        (1..=n)
            .map(|k| format!("{prefix}-{k:05}-of-{count}.gguf"))
            .collect()
    })
}

/// The file at `path`, or, when its name is a split's first (`…-00001-of-000NN.gguf`),
/// every file of the split from the same folder, in order.
pub fn open_files(
    path: &std::path::Path,
) -> Result<Shards<super::ReadSource<std::io::BufReader<std::fs::File>>>> {
    let open = |p: &std::path::PathBuf| {
        let file = std::fs::File::open(p)
            .map_err(|e| Error::invalid(format!("cannot open {}: {e}", p.display())))?;
        let len = file.metadata()?.len();
        Ok(super::ReadSource {
            reader: std::io::BufReader::with_capacity(1 << 20, file),
            len: Some(len),
        })
    };
    model_paths(path)
        .iter()
        .map(open)
        .collect::<Result<_>>()
        .map(Shards)
}

/// `path`, or every file of the split whose first it is, in order.
fn model_paths(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    match shard_names(&path.to_string_lossy()) {
        Some(names) => names.into_iter().map(std::path::PathBuf::from).collect(),
        None => vec![path.to_path_buf()],
    }
}

/// A model's files opened for reads by position (the f32 reference, `pippin convert`,
/// `info`): one GGUF file, or every file of a split model.
pub struct ModelFiles(Vec<std::io::BufReader<std::fs::File>>);

impl super::TensorReader for ModelFiles {
    fn read_tensor_of(&mut self, g: &Gguf, t: &super::TensorInfo) -> Result<Vec<u8>> {
        let f = self.0.get_mut(t.shard).ok_or_else(|| {
            Error::invalid(format!(
                "tensor {:?} is in file {}, not open",
                t.name,
                t.shard + 1
            ))
        })?;
        super::read_at(f, g, t)
    }
}

/// The model at `path` as one `Gguf` (the headers merged: `check_first`, `add`) and
/// its files: the file itself, or every file of the split whose first it is.
pub fn open_model(path: &std::path::Path) -> Result<(Gguf, ModelFiles)> {
    let paths = model_paths(path);
    let mut files = Vec::with_capacity(paths.len());
    let mut model: Option<Gguf> = None;
    for (k, p) in paths.iter().enumerate() {
        let (g, file) = Gguf::open(p)?;
        match model.as_mut() {
            None => {
                check_first(&g, paths.len())?;
                model = Some(g);
            }
            Some(m) => add(m, k, g)?,
        }
        files.push(std::io::BufReader::with_capacity(1 << 20, file));
    }
    let model = model.ok_or_else(|| Error::invalid("no model file"))?;
    Ok((model, ModelFiles(files)))
}

/// `g`'s `split.no` and `split.count`, or (0, 1) for a file that is not a shard.
fn position(g: &Gguf) -> Result<(u64, u64)> {
    let Some(count) = g.metadata.u64(SPLIT_COUNT) else {
        return Ok((0, 1));
    };
    let Some(no) = g.metadata.u64(SPLIT_NO) else {
        return Err(Error::gguf(format!(
            "a file has {SPLIT_COUNT} but no {SPLIT_NO}"
        )));
    };
    if no >= count || count > MAX_SHARDS as u64 {
        return Err(Error::gguf(format!("bad shard numbering: {no} of {count}")));
    }
    Ok((no, count))
}

/// Checks the first file's header (`model`) against the number of files given: a
/// file that is not a shard alone, or the first of as many shards as there are files.
pub fn check_first(model: &Gguf, files: usize) -> Result<()> {
    match position(model)? {
        (0, count) if count == files as u64 => Ok(()),
        (0, 1) => Err(Error::invalid(format!(
            "the first file is a whole model, not a split one; {files} files given"
        ))),
        (0, count) => Err(Error::invalid(format!(
            "the model is split into {count} files; {files} given"
        ))),
        (no, count) => Err(Error::gguf(format!(
            "the first file given is shard {} of {count}: give the files in order, from \
             the one named …-00001-of-{count:05}.gguf",
            no + 1
        ))),
    }
}

/// Adds the header of file `k` (1-based after the first, which is `model`) to the
/// model's: its tensors, tagged with their shard, and where its data starts.
pub fn add(model: &mut Gguf, k: usize, g: Gguf) -> Result<()> {
    let (no, count) = position(&g)?;
    // The same split: shard k of as many shards as the first file says.
    if no != k as u64 || count != position(model)?.1 {
        return Err(Error::gguf(format!(
            "file {} given is shard {} of {count}",
            k + 1,
            no + 1
        )));
    }
    model.shard_data.push(g.data_offset);
    model.file_len = model.file_len.zip(g.file_len).map(|(a, b)| a + b);
    for mut t in g.tensors {
        // A linear search (a few hundred names, once): no set's code in the wasm.
        if model.tensor(&t.name).is_some() {
            return Err(Error::gguf(format!("tensor {:?} is in two shards", t.name)));
        }
        t.shard = k;
        model.tensors.push(t);
    }
    Ok(())
}

/// The files of a split model as one source: the loaders read each file's header,
/// then each file front to back in turn.
pub struct Shards<S>(pub Vec<S>);

impl<S: ByteSource> ByteSource for Shards<S> {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        self.next_chunk_of(0).await
    }
    fn total_len(&self) -> Option<u64> {
        self.0
            .iter()
            .try_fold(0u64, |a, s| Some(a + s.total_len()?))
    }
    fn files(&self) -> usize {
        self.0.len()
    }
    async fn next_chunk_of(&mut self, file: usize) -> Result<Option<Vec<u8>>> {
        match self.0.get_mut(file) {
            Some(s) => s.next_chunk().await,
            None => Err(Error::invalid(format!("no model file {file}"))),
        }
    }
    fn total_len_of(&self, file: usize) -> Option<u64> {
        self.0.get(file)?.total_len()
    }
}

#[cfg(test)]
mod tests {
    use super::shard_names;

    #[test]
    fn a_first_shards_name_gives_every_shards_name() {
        assert_eq!(
            shard_names("https://x.org/m/q4-00001-of-00003.gguf").unwrap(),
            [
                "https://x.org/m/q4-00001-of-00003.gguf",
                "https://x.org/m/q4-00002-of-00003.gguf",
                "https://x.org/m/q4-00003-of-00003.gguf"
            ]
        );
        assert_eq!(shard_names("a-00001-of-00001.gguf").unwrap().len(), 1);
        for not in [
            "model.gguf",
            "m-00002-of-00003.gguf",
            "m-00001-of-3.gguf",
            "m-00001-of-00000.gguf",
            "m-00001-of-00003.bin",
            "m-1-of-00003.gguf",
        ] {
            assert_eq!(shard_names(not), None, "{not}");
        }
    }
}
