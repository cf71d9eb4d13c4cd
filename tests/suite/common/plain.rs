//! A backend seen through another, for tests that compare or break the real one:
//! `Through::plain` takes the `Backend` trait's defaults only (it does not chain steps,
//! so decode runs one step at a time, and computes a grammar mask before the step);
//! `full_logits` asks every step for all the logits (the generate loop then masks and
//! picks on the CPU); `fail` makes one forward pass or one chained read fail once (a
//! lost read-back), keeping the backend's chaining.

use pippin::engine::{Backend, Logits, Want};
use pippin::Result;

/// Which call fails once: the n-th forward pass, or the n-th read of a chained pick.
#[derive(Clone, Copy)]
pub enum Fail {
    Forward(usize),
    Read(usize),
}

pub struct Through<B> {
    pub inner: B,
    chain: bool,
    full_logits: bool,
    fail: Option<Fail>,
    calls: usize,
}

impl<B: Backend> Through<B> {
    pub fn plain(inner: B) -> Self {
        Through {
            inner,
            chain: false,
            full_logits: false,
            fail: None,
            calls: 0,
        }
    }

    /// Every step asked for all the logits; each must carry a grammar mask.
    pub fn full_logits(inner: B) -> Self {
        Through {
            full_logits: true,
            ..Self::plain(inner)
        }
    }

    /// The backend as it is (chaining where it chains) but for one failing call.
    pub fn failing(inner: B, fail: Fail) -> Self {
        let chain = inner.chains();
        Through {
            chain,
            fail: Some(fail),
            ..Self::plain(inner)
        }
    }

    /// Whether this call (the `n`-th of its kind) is the one that fails.
    fn fails(&mut self, read: bool) -> Result<()> {
        self.calls += 1;
        match self.fail {
            Some(Fail::Forward(n)) if !read && n == self.calls => {}
            Some(Fail::Read(n)) if read && n == self.calls => {}
            _ => return Ok(()),
        }
        Err(pippin::Error::gpu("the read-back failed"))
    }
}

impl<B: Backend> Backend for Through<B> {
    async fn forward(&mut self, tokens: &[u32], want: Want<'_>) -> Result<Logits> {
        if let Some(Fail::Forward(_)) = self.fail {
            self.fails(false)?;
        }
        if self.full_logits {
            assert!(want.mask.is_some(), "a guided step carries its mask");
            return self.inner.forward(tokens, Want::logits()).await;
        }
        self.inner.forward(tokens, want).await
    }
    fn tokens(&self) -> &[u32] {
        self.inner.tokens()
    }
    fn truncate(&mut self, len: usize) {
        self.inner.truncate(len)
    }
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.inner.log_probs(tokens).await
    }
    fn context_length(&self) -> usize {
        self.inner.context_length()
    }
    fn chains(&self) -> bool {
        self.chain
    }
    fn submit(&mut self, tokens: &[u32], want: Want<'_>) -> Result<()> {
        self.inner.submit(tokens, want)
    }
    async fn chosen(&mut self) -> Result<u32> {
        if let Some(Fail::Read(_)) = self.fail {
            self.fails(true)?;
        }
        self.inner.chosen().await
    }
    fn cancel(&mut self) {
        self.inner.cancel()
    }
}

/// A reply driven to its end through `b` (one of whose calls fails once): the text, the
/// errors seen on the way, and the generated token count of the last event. Each error
/// must be the lost read-back, and the reply must go on after it.
pub fn through_errors<B: Backend>(
    b: &mut B,
    tk: &pippin::tokenizer::Tokenizer,
    ids: &[u32],
    opts: &pippin::engine::GenerateOptions,
) -> (String, usize, (pippin::engine::FinishReason, usize)) {
    use pippin::engine::{Event, Generation};
    let mut g = pollster::block_on(Generation::start(b, tk, ids, opts)).unwrap();
    let (mut text, mut errors) = (String::new(), 0);
    loop {
        match pollster::block_on(g.next(b, tk)) {
            Ok(Event::Text { text: t, .. }) => text.push_str(&t),
            Ok(Event::Done { finish, usage, .. }) => {
                return (text, errors, (finish, usage.generated_tokens))
            }
            Err(e) => {
                assert!(e.to_string().contains("read-back failed"), "{e}");
                errors += 1;
            }
        }
    }
}
