//! Sampling on the GPU against the sampler: the top k (`top_k.wgsl`, optionally
//! under guided generation's mask) and the pick among them (`choose.wgsl`).

use super::Ctx;
use crate::kernels::{sample, Step};
use crate::sampler::{Sampler, SamplerOptions};

/// The GPU's top `kk` (id, logit) of `logits`, only tokens whose bit is set in
/// `mask` when there is one (tokens past its end are not allowed), against the
/// CPU's: by logit, ties to the smaller id. (gpu, cpu).
pub async fn top_k(
    c: &Ctx,
    logits: &[f32],
    kk: usize,
    mask: Option<&[u32]>,
) -> (Vec<(u32, f32)>, Vec<(u32, f32)>) {
    let vocab = logits.len();
    let top = sample::TopK::new(&c.gpu, vocab).expect("top-k buffers");
    if let Some(m) = mask {
        top.write_mask(&c.gpu, m);
    }
    let lb = c.buf(logits);
    // The count is a uniform: one pair of pipelines serves every k.
    let step = c.step_of(Step {
        top_k: kk as u32,
        masked: mask.is_some() as u32,
        ..Step::new(1, 0)
    });
    c.run(&step, |p| top.encode(p, &lb).expect("top-k"));
    let got = sample::decode_pairs(&c.bytes(&top.out, kk * 8).await, vocab);
    let allowed =
        |t: usize| mask.is_none_or(|m| m.get(t / 32).is_some_and(|w| w >> (t % 32) & 1 == 1));
    let mut want: Vec<(u32, f32)> = (0..vocab)
        .filter(|&t| allowed(t))
        .map(|t| (t as u32, logits[t]))
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    want.truncate(kk);
    (got, want)
}

/// `draws` picks on the GPU (`choose.wgsl`, after the top `top_k` of `logits`) with
/// draws spread over [0, 1), each the sampler's pick from the same candidates and
/// draw (greedy: the first); draws within 1e-5 of a boundary between two tokens are
/// skipped (f32 sums may differ in their last bit). How many were compared.
pub async fn pick(c: &Ctx, logits: &[f32], opts: SamplerOptions, draws: usize) -> usize {
    let vocab = logits.len();
    let top = sample::TopK::new(&c.gpu, vocab).expect("top-k buffers");
    let (lb, tokens) = (c.buf(logits), c.zeros(4));
    let sampler = Sampler::new(opts.clone());
    let greedy = opts.temperature == 0.0;
    let mut compared = 0;
    for i in 0..draws {
        let u = i as f32 / draws as f32 + 0.013;
        let step = c.step_of(Step {
            top_k: opts.top_k as u32,
            temperature: opts.temperature,
            top_p: opts.top_p,
            min_p: opts.min_p,
            u,
            ..Step::new(1, 0)
        });
        c.run(&step, |p| {
            top.encode(p, &lb).expect("top-k");
            top.choose(p, &tokens).expect("choose");
        });
        let got = c.bytes(&tokens, 4).await;
        let got = u32::from_le_bytes([got[0], got[1], got[2], got[3]]);
        let cands = c.bytes(&top.out, opts.top_k * 8).await;
        let cands = sample::decode_pairs(&cands, vocab);
        let want = match greedy {
            true => cands[0].0,
            false => sampler.pick(cands.clone(), u),
        };
        let near = !greedy
            && (sampler.pick(cands.clone(), u - 1e-5) != want
                || sampler.pick(cands, u + 1e-5) != want);
        if !near {
            let o = &opts;
            assert_eq!(
                got, want,
                "k {} T {} top-p {} min-p {} u {u}",
                o.top_k, o.temperature, o.top_p, o.min_p
            );
            compared += 1;
        }
    }
    compared
}
