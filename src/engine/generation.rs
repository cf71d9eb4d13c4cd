//! One reply as it is generated (`Generation`), shared by every backend: prefill the
//! prompt, then sample, stream and stop (stop tokens, stop strings, max tokens, context
//! length, abort), with speculative checks and pipelined steps where the backend
//! offers them; `generate` drives it with a callback.

mod chained;
mod speculative;

use super::backend::AnyBackend;
use super::backend::{common_prefix, Backend, Logits, Masked, Pick, Want};
use super::logprobs::{self, TokenLogprob};
use super::speculate::{Policy, Speculation};
use super::stop::StopStrings;
use super::tools::CallReader;
use super::{Event, FinishReason, GenerateOptions, Usage, MAX_CANDIDATES};
use crate::error::{Error, Result};
use crate::guided::{GrammarCache, Guide};
use crate::sampler::Sampler;
use crate::tokenizer::{TextStream, Tokenizer, ToolCall};
use web_time::Instant;

/// Where a reply's decoding stands between two steps: exactly one of these. A step
/// moves it on (`Generation::step`): one-token steps go ToRun → Logits → ToRun…,
/// pipelined ones Picked → InFlight → InFlight…, a speculative check ToRun → ToRun;
/// a failed step leaves it where it was, so the next call retries.
enum Decode {
    /// The last step's logits, to pick the next token from.
    Logits(Logits),
    /// A token picked and not handled yet (the prompt's, on a backend that chains).
    Picked(u32),
    /// A token handled (counted, its text queued) and not run yet: the next step runs
    /// it, with guesses after it when speculating.
    ToRun(u32),
    /// Pipelined: a submitted step whose pick is still to be read.
    InFlight,
    /// Nothing to run or read: the reply has ended (or ends at the next step).
    Idle,
}

/// One reply being generated, pulled a piece at a time (the browser's async iterator
/// drives it step by step; `generate` drives it with a callback).
pub struct Generation {
    opts: GenerateOptions,
    sampler: Sampler,
    history: Vec<u32>,
    text: TextStream,
    stops: StopStrings,
    top_k: usize,
    usage: Usage,
    /// Where decoding stands between steps.
    decode: Decode,
    /// Pipelined decode (a backend that `chains`): the next step is submitted
    /// before the token of the one running is read. Off after a failed step.
    chained: bool,
    /// The backend's steps pick among their best `top_k` candidates (the GPU's
    /// selection), not among the whole vocabulary: a check's rows are cut alike.
    cut: bool,
    /// Pipelined steps in a row: from the second, a step's wait is one step's time
    /// (what the speculation policy weighs checks against).
    piped: usize,
    /// Guided generation: the tokens allowed next (decode is then not pipelined:
    /// each mask depends on the token before).
    guide: Option<Guide>,
    /// Logprobs or a logit bias: steps return every logit (see `logprobs`).
    full: bool,
    /// The last pick's log-probabilities, until its token is handled.
    picked: Option<logprobs::Step>,
    /// Handled tokens' log-probabilities, until text carries them out.
    spelled: Vec<TokenLogprob>,
    /// Those of text a tool-call reader held back, until text it lets out.
    held: Vec<TokenLogprob>,
    /// A reply that may be a tool call: its text passes through here.
    calls: Option<CallReader>,
    tool_calls: Vec<ToolCall>,
    /// How many tokens speculative decoding guesses (a backend that verifies; none
    /// when off).
    policy: Option<Policy>,
    outbox: std::collections::VecDeque<Event>,
    finished: Option<FinishReason>,
    started: Instant,
    /// When the reply was asked for (`time_to_first_token_ms` counts from here).
    asked: Instant,
}

impl Generation {
    /// Checks the request and runs the prompt (the whole conversation so far; the
    /// part already in the backend's KV cache is not run again).
    pub async fn start<B: Backend>(
        backend: &mut B,
        tk: &Tokenizer,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Generation> {
        Self::start_cached(backend, tk, prompt, opts, &GrammarCache::default()).await
    }

    /// As `start`, with the model's compiled vocabulary for guided replies kept in
    /// `grammars` (the engine keeps one).
    pub async fn start_cached<B: Backend>(
        backend: &mut B,
        tk: &Tokenizer,
        prompt: &[u32],
        opts: &GenerateOptions,
        grammars: &GrammarCache,
    ) -> Result<Generation> {
        opts.sampler.validate().map_err(Error::invalid)?;
        opts.logit_bias.check(tk.vocab_size())?;
        if opts
            .logprobs
            .is_some_and(|n| n > logprobs::MAX_TOP_LOGPROBS)
        {
            return Err(Error::invalid(format!(
                "logprobs lists at most {} alternatives a token",
                logprobs::MAX_TOP_LOGPROBS
            )));
        }
        // Before any token: an invalid or unsatisfiable format fails here.
        let guide = match &opts.response_format {
            Some(f) => grammars.guide(tk, f).await?,
            None => None,
        };
        if prompt.is_empty() {
            return Err(Error::invalid("the prompt is empty"));
        }
        let ctx = backend.context_length();
        if prompt.len() >= ctx {
            return Err(Error::context_full(format!(
                "the prompt has {} tokens but the context holds {ctx} (and one more is needed to answer)",
                prompt.len()
            )));
        }
        let keep = common_prefix(backend.tokens(), prompt).min(prompt.len() - 1);
        backend.truncate(keep);
        // A backend may keep less than asked (a ring cache that no longer holds it).
        let keep = backend.tokens().len().min(keep);
        let sampler = Sampler::new(opts.sampler.clone());
        let top_k = if opts.sampler.temperature == 0.0 {
            1
        } else if opts.sampler.top_k == 0 {
            MAX_CANDIDATES
        } else {
            opts.sampler.top_k.min(MAX_CANDIDATES)
        };
        let full = opts.logprobs.is_some() || !opts.logit_bias.is_empty();
        // The device's picks see neither a bias nor the whole distribution.
        let chained = backend.chains() && guide.is_none() && !full;
        let policy = match (backend.verifies(), opts.speculation) {
            (_, Speculation::Off) => None,
            (n, s) if n > 1 => Some(Policy::new(n - 1, s == Speculation::On)),
            _ => None,
        };
        let mut g = Generation {
            opts: opts.clone(),
            sampler,
            history: prompt.to_vec(),
            text: TextStream::new(),
            stops: StopStrings::new(&opts.stop),
            top_k,
            usage: Usage {
                prompt_tokens: prompt.len(),
                cached_tokens: keep,
                ..Default::default()
            },
            decode: Decode::Idle,
            chained,
            piped: 0,
            cut: backend.chains(),
            full,
            picked: None,
            spelled: Vec::new(),
            held: Vec::new(),
            guide,
            calls: None,
            tool_calls: Vec::new(),
            policy,
            outbox: Default::default(),
            finished: None,
            started: Instant::now(),
            asked: Instant::now(),
        };
        let t0 = Instant::now();
        if g.chained {
            let ids = g.sampler.penalized_ids(&g.history);
            let pick = g.next_pick(false);
            backend.submit(&prompt[keep..], g.want(&ids, pick))?;
            match backend.chosen().await {
                Ok(t) => g.decode = Decode::Picked(t),
                Err(e) => {
                    backend.cancel();
                    return Err(e);
                }
            }
        } else {
            g.decode = Decode::Logits(g.run(backend, &prompt[keep..]).await?);
        }
        g.usage.prefill_ms = ms_since(t0);
        g.started = Instant::now();
        Ok(g)
    }

    /// Runs `tokens`. Guided, the mask of the position they lead to is computed while
    /// the device runs them (on a backend that can split a step).
    async fn run<B: Backend>(&mut self, backend: &mut B, tokens: &[u32]) -> Result<Logits> {
        let ids = self.sampler.penalized_ids(&self.history);
        if !self.guide.as_ref().is_some_and(Guide::is_stale) {
            return backend
                .forward(tokens, self.want(&ids, Pick::default()))
                .await;
        }
        let want = Want {
            top_k: self.selects(),
            penalty: self.opts.sampler.repetition_penalty,
            penalty_ids: &ids,
            pick: Pick::default(),
            mask: None,
        };
        // The guide stays in place (a dropped future leaves the reply guided).
        let guide = &mut self.guide;
        let mut mask = || match guide {
            Some(g) => {
                g.update()?;
                Ok(g.mask().to_vec())
            }
            None => Err(Error::Grammar("the reply lost its guide".into())),
        };
        let mask = &mut mask;
        backend.forward_masked(Masked { tokens, want, mask }).await
    }

    /// The candidates a step selects: every logit where the reply needs them all.
    fn selects(&self) -> Option<usize> {
        (!self.full).then_some(self.top_k)
    }

    fn want<'a>(&'a self, ids: &'a [u32], pick: Pick) -> Want<'a> {
        Want {
            top_k: self.selects(),
            penalty: self.opts.sampler.repetition_penalty,
            penalty_ids: ids,
            pick,
            mask: self.guide.as_ref().map(Guide::mask),
        }
    }

    /// Picks from a step's result. Guided, full logits are masked here (a backend
    /// that selects candidates masked them already): the penalty first, as unguided,
    /// then the allowed tokens alone, best first, are the candidates. On a backend
    /// whose steps select the best `top_k` (`cut`), a check's full rows are cut to
    /// them too: the same candidates, so the same draw picks the same token.
    fn choose(&mut self, logits: Logits) -> u32 {
        let mut logits = logits;
        let raw = match (&mut logits, self.opts.logprobs) {
            (Logits::Full(l), n) => {
                let raw = n.map(|_| l.clone());
                logprobs::bias(l, &self.opts.logit_bias);
                raw
            }
            _ => None,
        };
        let token = self.choose_biased(logits);
        self.picked = raw.map(|l| logprobs::step(&l, token, self.opts.logprobs.unwrap_or(0)));
        token
    }

    fn choose_biased(&mut self, logits: Logits) -> u32 {
        let logits = match (&self.guide, logits) {
            (guide, Logits::Full(mut l)) if guide.is_some() || self.cut => {
                self.sampler.penalize(&mut l, &self.history);
                let mut allowed: Vec<(u32, f32)> = (0u32..)
                    .zip(l)
                    .filter(|(t, _)| guide.as_ref().is_none_or(|g| g.allows(*t)))
                    .collect();
                let best = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
                // A check's row picks among the candidates a step would have had.
                if self.cut && allowed.len() > self.top_k {
                    allowed.select_nth_unstable_by(self.top_k.max(1) - 1, best);
                    allowed.truncate(self.top_k.max(1));
                }
                allowed.sort_by(best);
                Logits::Top(allowed)
            }
            (_, l) => l,
        };
        self.sampler.choose(logits, &self.history)
    }

    /// How the device picks the next token: the sampler's settings and its next
    /// draw (none when greedy, as the CPU sampler draws none).
    fn next_pick(&mut self, penalize_input: bool) -> Pick {
        let o = &self.opts.sampler;
        let mut pick = Pick {
            temperature: o.temperature,
            top_p: o.top_p,
            min_p: o.min_p,
            penalize_input: penalize_input && o.repeat_last_n > 0,
            ..Pick::default()
        };
        if o.temperature > 0.0 {
            pick.u = self.sampler.next_u();
        }
        pick
    }

    /// Takes tool calls out of this reply (see `tools::prepare`).
    pub fn expect_calls(&mut self, reader: CallReader) {
        self.calls = Some(reader);
    }

    /// Counts `time_to_first_token_ms` from `t` (the engine's start of the request,
    /// before its template and tokens) instead of from the prompt's run.
    pub fn asked_at(&mut self, t: Instant) {
        self.asked = t;
    }

    /// The next piece of text, or `Done` (again and again once finished).
    pub async fn next<B: Backend>(&mut self, backend: &mut B, tk: &Tokenizer) -> Result<Event> {
        self.next_with(backend, None, tk).await
    }

    /// As `next`, with a draft model proposing the guesses of speculative decoding
    /// (instead of prompt lookup) when one is given.
    pub async fn next_with<B: Backend>(
        &mut self,
        backend: &mut B,
        draft: Option<&mut AnyBackend<'_>>,
        tk: &Tokenizer,
    ) -> Result<Event> {
        let e = self.next_event(backend, draft, tk).await?;
        if matches!(e, Event::Text { .. }) && self.usage.time_to_first_token_ms == 0.0 {
            self.usage.time_to_first_token_ms = ms_since(self.asked).max(f64::MIN_POSITIVE);
        }
        Ok(e)
    }

    async fn next_event<B: Backend>(
        &mut self,
        backend: &mut B,
        mut draft: Option<&mut AnyBackend<'_>>,
        tk: &Tokenizer,
    ) -> Result<Event> {
        loop {
            if let Some(e) = self.outbox.pop_front() {
                match (e, &mut self.calls) {
                    (
                        Event::Text {
                            text,
                            token,
                            logprobs,
                        },
                        Some(r),
                    ) => {
                        self.held.extend(logprobs);
                        let text = r.push(&text);
                        if !text.is_empty() {
                            return Ok(Event::Text {
                                text,
                                token,
                                logprobs: std::mem::take(&mut self.held),
                            });
                        }
                    }
                    (e, _) => return Ok(e),
                }
                continue;
            }
            if let Some(finish) = self.finished {
                if let Some(mut r) = self.calls.take() {
                    let (finish, calls, rest) = r.finish(finish);
                    self.finished = Some(finish);
                    self.tool_calls = calls;
                    if !rest.is_empty() {
                        let token = *self.history.last().unwrap_or(&0);
                        return Ok(Event::Text {
                            text: rest,
                            token,
                            logprobs: std::mem::take(&mut self.held),
                        });
                    }
                }
                return Ok(Event::Done {
                    finish: self.finished.unwrap_or(finish),
                    usage: self.usage.clone(),
                    calls: self.tool_calls.clone(),
                });
            }
            self.step(backend, draft.as_deref_mut(), tk).await?;
        }
    }

    /// Ends the generation now; what was run stays in the KV cache.
    pub fn abort(&mut self) -> Event {
        self.outbox.clear();
        if self.finished.is_none() {
            self.finished = Some(FinishReason::Abort);
            self.usage.decode_ms = ms_since(self.started);
        }
        Event::Done {
            finish: self.finished.unwrap_or(FinishReason::Abort),
            usage: self.usage.clone(),
            calls: self.tool_calls.clone(),
        }
    }

    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// Samples one token (running the previous one first) and queues its text.
    async fn step<B: Backend>(
        &mut self,
        backend: &mut B,
        draft: Option<&mut AnyBackend<'_>>,
        tk: &Tokenizer,
    ) -> Result<()> {
        // The state moves only once the step succeeded: after a failure the same token
        // runs again, and the caller sees the error, not a quiet end.
        if let Decode::ToRun(t) = self.decode {
            if self.speculate(backend, draft, tk, t).await? {
                return Ok(());
            }
            if self.chained {
                // Nothing to guess: the token runs on the chain again.
                return self.rejoin(backend, t);
            }
            let started = Instant::now();
            self.decode = Decode::Logits(self.run(backend, &[t]).await?);
            if let Some(p) = &mut self.policy {
                p.stepped(started.elapsed().as_secs_f64() * 1e3);
            }
            self.usage.speculation.forwards += 1;
        } else if self.chained {
            // A pipelined reply leaves its chain only for speculative checks (ToRun).
            let r = self.step_chained(backend, tk).await;
            if r.is_err() {
                self.unchain(backend);
            }
            return r;
        }
        if self.usage.generated_tokens >= self.opts.max_tokens {
            return self.finish(tk, FinishReason::Length);
        }
        let token = match std::mem::replace(&mut self.decode, Decode::Idle) {
            Decode::Picked(t) => t,
            Decode::Logits(logits) => self.choose(logits),
            _ => return self.finish(tk, FinishReason::Length),
        };
        let cached = backend.tokens().len();
        if self.handle(tk, token, cached, backend.context_length())? {
            self.decode = Decode::ToRun(token);
        }
        Ok(())
    }

    /// Counts `token`, queues its text and decides whether the reply goes on (the
    /// cache then holding `cached` tokens before it, of a context of `ctx`).
    fn handle(&mut self, tk: &Tokenizer, token: u32, cached: usize, ctx: usize) -> Result<bool> {
        self.usage.generated_tokens += 1;
        let picked = self.picked.take();
        if self.guide.as_ref().is_some_and(|g| !g.allows(token)) {
            // Only when no candidate was allowed: never text outside the format.
            return Err(Error::Grammar(format!(
                "token {token} is outside the response format (the model gave no allowed token)"
            )));
        }
        if tk.stop_tokens().contains(&token) {
            self.finish(tk, FinishReason::Stop)?;
            return Ok(false);
        }
        // The next mask is computed while the device runs this token (`run`).
        let complete = match &mut self.guide {
            Some(g) => g.consume(token)?,
            None => false,
        };
        self.history.push(token);
        self.spelled.extend(picked.map(|p| p.spelled(tk)));
        let (piece, hit) = self.stops.push(&self.text.push(tk, token)?);
        if !piece.is_empty() {
            self.emit(piece, token);
        }
        if hit {
            // Nothing after a stop string is emitted.
            self.usage.decode_ms = ms_since(self.started);
            self.finished = Some(FinishReason::Stop);
            return Ok(false);
        }
        if complete {
            self.finish(tk, FinishReason::Stop)?;
            return Ok(false);
        }
        if self.usage.generated_tokens >= self.opts.max_tokens || cached + 1 >= ctx {
            self.finish(tk, FinishReason::Length)?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Queues a piece of text with the log-probabilities of the tokens before it.
    fn emit(&mut self, text: String, token: u32) {
        let logprobs = std::mem::take(&mut self.spelled);
        self.outbox.push_back(Event::Text {
            text,
            token,
            logprobs,
        });
    }

    /// Ends with `reason`, emitting text still held back (a partial character, a
    /// possible start of a stop string).
    fn finish(&mut self, tk: &Tokenizer, reason: FinishReason) -> Result<()> {
        let rest = self.stops.finish(&self.text.finish(tk)?);
        if !rest.is_empty() {
            let token = *self.history.last().unwrap_or(&0);
            self.emit(rest, token);
        }
        self.usage.decode_ms = ms_since(self.started);
        self.finished = Some(reason);
        Ok(())
    }
}

/// Generates after `prompt` (the whole conversation so far), calling
/// `on_text(text, token)` for each piece of text; returning `false` from it aborts.
/// The part of `prompt` already in the backend's KV cache is not run again.
pub async fn generate<B: Backend>(
    backend: &mut B,
    tk: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_text: impl FnMut(&str, u32) -> bool,
) -> Result<(FinishReason, Usage)> {
    let (finish, usage, _) = generate_calls(backend, tk, prompt, opts, None, on_text).await?;
    Ok((finish, usage))
}

/// As `generate`, with tool calls taken out of the reply by `calls` (from
/// `tools::prepare`) and returned.
pub async fn generate_calls<B: Backend>(
    backend: &mut B,
    tk: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    calls: Option<CallReader>,
    on_text: impl FnMut(&str, u32) -> bool,
) -> Result<(FinishReason, Usage, Vec<ToolCall>)> {
    generate_drafted(backend, None, tk, prompt, opts, calls, on_text).await
}

/// As `generate_calls`, with a draft model (of `backend`'s vocabulary) proposing
/// speculative decoding's guesses when one is given.
pub async fn generate_drafted<B: Backend>(
    backend: &mut B,
    mut draft: Option<&mut AnyBackend<'_>>,
    tk: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    calls: Option<CallReader>,
    mut on_text: impl FnMut(&str, u32) -> bool,
) -> Result<(FinishReason, Usage, Vec<ToolCall>)> {
    let mut g = Generation::start(backend, tk, prompt, opts).await?;
    if let Some(d) = draft.as_deref_mut() {
        g.prefill_draft(d).await?;
    }
    if let Some(r) = calls {
        g.expect_calls(r);
    }
    loop {
        let e = match g.next_with(backend, draft.as_deref_mut(), tk).await? {
            Event::Text { text, token, .. } if !on_text(&text, token) => g.abort(),
            e => e,
        };
        if let Event::Done {
            finish,
            usage,
            calls,
        } = e
        {
            return Ok((finish, usage, calls));
        }
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}
