// Included by the matmul and embedding kernels: weight rows as packed by
// src/quant/gpu_layout.rs, dequantized eight values at a time in registers.
// FORMAT is one of the GPU_* ids of `GpuFormat::id` (src/quant/gpu_layout.rs): the
// GPU's own formats and GGML's block formats (GPU_<GGML name>, from the formats'
// types in cpu-kernels/src/blocks32.rs), which build.rs writes as WGSL constants:
// "formats.wgsl" is generated, not a file here (with `qs_words_of`, the words of
// packed values per block of a format).
// Rows are walked in blocks of 32 values; a K-quant super-block is 8 such blocks
// sharing 5 words of scales (d|dmin, then 16 sub-scale bytes).

#include "formats.wgsl"

override FORMAT: u32 = GPU_Q4_1;
// Palettes: rows sharing one table (f16 entries, two a word, in w_scales).
override LUT_ROWS: u32 = 16u;

@group(0) @binding(1) var<storage, read> w_qs: array<u32>;
@group(0) @binding(2) var<storage, read> w_scales: array<u32>;

// A part of a matrix split by rows (one binding each): its first row and row count,
// a uniform of the part's own, so parts share one pipeline.
struct Part {
    row0: u32,
    rows: u32,
}

fn qs_words() -> u32 {
    return qs_words_of(FORMAT);
}

struct W8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

// Two f16 values of a word, subnormals included: WGSL lets implementations flush
// subnormals to zero, and real files are full of them (Q6_K's d is subnormal in
// almost every block of Gemma 3).
fn halves(w: u32) -> vec2<f32> {
    let h = vec2<u32>(w & 0xffffu, w >> 16u);
    let sign = select(vec2<f32>(1.0), vec2<f32>(-1.0), (h & vec2<u32>(0x8000u)) != vec2<u32>(0u));
    // Exponent 0: mantissa · 2^-24, exact in f32.
    let small = vec2<f32>(h & vec2<u32>(0x3ffu)) * 5.9604645e-8 * sign;
    return select(unpack2x16float(w), small, (h & vec2<u32>(0x7c00u)) == vec2<u32>(0u));
}

// Block `blk`'s f16 scale, two to a word.
fn half_scale(blk: u32) -> f32 {
    let h = halves(w_scales[blk / 2u]);
    return select(h.x, h.y, (blk & 1u) == 1u);
}

fn nibbles_u(w: u32, shift: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(15u);
}

fn nibbles(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(nibbles_u(w, shift));
}

// Values 8p..8p+7 of a block whose 32 nibbles follow Q4_0 (byte j: value j low, j + 16
// high), the block's words starting at `base`.
fn nibbles8(base: u32, part: u32) -> W8 {
    let o = base + (part % 2u) * 2u;
    let shift = select(0u, 4u, part >= 2u);
    return W8(nibbles(w_qs[o], shift), nibbles(w_qs[o + 1u], shift));
}

// Eight one-bit values: bits first..first+7 of w.
fn bits8(w: u32, first: u32) -> W8 {
    let s = vec4<u32>(0u, 1u, 2u, 3u) + first;
    return W8(vec4<f32>((vec4<u32>(w) >> s) & vec4<u32>(1u)),
              vec4<f32>((vec4<u32>(w) >> (s + 4u)) & vec4<u32>(1u)));
}

// Eight two-bit values of part `part` from 2-bit words at `base` (value e at bits
// 2(e % 16) of word e / 16).
fn crumbs8(base: u32, part: u32) -> W8 {
    let w = vec4<u32>(w_qs[base + part / 2u]);
    let s = vec4<u32>(0u, 2u, 4u, 6u) + (part % 2u) * 16u;
    return W8(vec4<f32>((w >> s) & vec4<u32>(3u)), vec4<f32>((w >> (s + 8u)) & vec4<u32>(3u)));
}

fn bytes_i8(w: u32) -> vec4<f32> {
    let s = bitcast<i32>(w);
    return vec4<f32>(vec4<i32>(
        extractBits(s, 0u, 8u), extractBits(s, 8u, 8u),
        extractBits(s, 16u, 8u), extractBits(s, 24u, 8u)));
}

// K-quants: sub-scale byte i of super-block sb, unsigned and signed.
fn k_byte(sb: u32, i: u32) -> u32 {
    return (w_scales[sb * 5u + 1u + i / 4u] >> (8u * (i % 4u))) & 255u;
}

fn k_sbyte(sb: u32, i: u32) -> f32 {
    return f32(extractBits(bitcast<i32>(w_scales[sb * 5u + 1u + i / 4u]), 8u * (i % 4u), 8u));
}

// The current row group's table, held in registers: a thread reads one row's blocks
// in turn, so it is loaded once per row (group) rather than once per weight. IQ4_NL's
// fixed levels use the same table.
var<private> lut: array<f32, 16>;
var<private> lut_group: u32 = 0xffffffffu;

fn load_lut(row: u32) {
    if FORMAT == GPU_IQ4_NL {
        if lut_group != 0u {
            lut_group = 0u;
            lut = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
        }
        return;
    }
    if FORMAT == GPU_MXFP4 {
        if lut_group != 0u {
            lut_group = 0u;
            lut = array<f32, 16>(0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
                                 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
        }
        return;
    }
    let g = row / LUT_ROWS;
    if g == lut_group {
        return;
    }
    lut_group = g;
    let words = select(2u, 8u, FORMAT == GPU_PAL4);
    for (var i = 0u; i < words; i++) {
        let h = halves(w_scales[g * words + i]);
        lut[2u * i] = h.x;
        lut[2u * i + 1u] = h.y;
    }
}

// Table entries for four indices by a tree of selects on the index bits: no dynamic
// indexing, which software adapters turn into per-lane gathers.
fn pick(q: vec4<u32>) -> vec4<f32> {
    let b0 = (q & vec4<u32>(1u)) != vec4<u32>(0u);
    let b1 = (q & vec4<u32>(2u)) != vec4<u32>(0u);
    let lo = select(select(vec4<f32>(lut[0]), vec4<f32>(lut[1]), b0),
                    select(vec4<f32>(lut[2]), vec4<f32>(lut[3]), b0), b1);
    if FORMAT == GPU_PAL2 {
        return lo;
    }
    let m1 = select(select(vec4<f32>(lut[4]), vec4<f32>(lut[5]), b0),
                    select(vec4<f32>(lut[6]), vec4<f32>(lut[7]), b0), b1);
    let m2 = select(select(vec4<f32>(lut[8]), vec4<f32>(lut[9]), b0),
                    select(vec4<f32>(lut[10]), vec4<f32>(lut[11]), b0), b1);
    let hi = select(select(vec4<f32>(lut[12]), vec4<f32>(lut[13]), b0),
                    select(vec4<f32>(lut[14]), vec4<f32>(lut[15]), b0), b1);
    let b2 = (q & vec4<u32>(4u)) != vec4<u32>(0u);
    let b3 = (q & vec4<u32>(8u)) != vec4<u32>(0u);
    return select(select(lo, m1, b2), select(m2, hi, b2), b3);
}

// Eight table entries: indices of `width` bits from `w`, starting at bit `shift`.
fn lut8(w: u32, shift: u32, width: u32) -> W8 {
    let m = vec4<u32>((1u << width) - 1u);
    let s = vec4<u32>(0u, 1u, 2u, 3u) * width + shift;
    return W8(pick((vec4<u32>(w) >> s) & m), pick((vec4<u32>(w) >> (s + 4u * width)) & m));
}

// K-quant blocks: values 8p..8p+7 of block `blk` (super-block blk / 8).
fn k_quant8(blk: u32, base: u32, part: u32) -> W8 {
    let sb = blk / 8u;
    let j = blk % 8u;
    let dm = halves(w_scales[sb * 5u]);
    // Q2_K, Q3_K and Q6_K scale 16 values at a time: sub-scale 2j + part / 2.
    let s16 = 2u * j + part / 2u;
    switch FORMAT {
        case GPU_Q2_K: {
            let sc = k_byte(sb, s16);
            let dl = dm.x * f32(sc & 15u);
            let ml = dm.y * f32(sc >> 4u);
            let q = crumbs8(base, part);
            return W8(q.a * dl - ml, q.b * dl - ml);
        }
        case GPU_Q3_K: {
            let dl = dm.x * k_sbyte(sb, s16);
            let q = crumbs8(base, part);
            let h = bits8(w_qs[base + 2u], part * 8u);
            return W8((q.a + 4.0 * h.a - 4.0) * dl, (q.b + 4.0 * h.b - 4.0) * dl);
        }
        case GPU_Q6_K: {
            let dl = dm.x * k_sbyte(sb, s16);
            let q = nibbles8(base, part);
            let h = crumbs8(base + 4u, part);
            return W8((q.a + 16.0 * h.a - 32.0) * dl, (q.b + 16.0 * h.b - 32.0) * dl);
        }
        default: {
            // Q4_K, Q5_K: a 6-bit scale and minimum per block.
            let d1 = dm.x * f32(k_byte(sb, j));
            let m1 = dm.y * f32(k_byte(sb, 8u + j));
            var q = nibbles8(base, part);
            if FORMAT == GPU_Q5_K {
                let h = bits8(w_qs[base + 4u], part * 8u);
                q = W8(q.a + 16.0 * h.a, q.b + 16.0 * h.b);
            }
            return W8(q.a * d1 - m1, q.b * d1 - m1);
        }
    }
}

// Values part*8 .. part*8+7 of block `b` of row `row` (rows of `nb` blocks; part 0..3).
fn weight8(row: u32, nb: u32, b: u32, part: u32) -> W8 {
    let blk = row * nb + b;
    let base = blk * qs_words();
    switch FORMAT {
        case GPU_PAL4: {
            load_lut(row);
            return lut8(w_qs[base + part], 0u, 4u);
        }
        case GPU_PAL2: {
            load_lut(row);
            return lut8(w_qs[base + part / 2u], (part % 2u) * 16u, 2u);
        }
        case GPU_F32: {
            let o = base + part * 8u;
            return W8(
                vec4<f32>(bitcast<f32>(w_qs[o]), bitcast<f32>(w_qs[o + 1u]),
                          bitcast<f32>(w_qs[o + 2u]), bitcast<f32>(w_qs[o + 3u])),
                vec4<f32>(bitcast<f32>(w_qs[o + 4u]), bitcast<f32>(w_qs[o + 5u]),
                          bitcast<f32>(w_qs[o + 6u]), bitcast<f32>(w_qs[o + 7u])));
        }
        case GPU_F16: {
            let o = base + part * 4u;
            return W8(
                vec4<f32>(halves(w_qs[o]), halves(w_qs[o + 1u])),
                vec4<f32>(halves(w_qs[o + 2u]), halves(w_qs[o + 3u])));
        }
        case GPU_Q8_0: {
            let o = base + part * 2u;
            let d = half_scale(blk);
            return W8(bytes_i8(w_qs[o]) * d, bytes_i8(w_qs[o + 1u]) * d);
        }
        case GPU_Q5_0, GPU_Q5_1: {
            let q = nibbles8(base, part);
            let h = bits8(w_qs[base + 4u], part * 8u);
            let a = q.a + 16.0 * h.a;
            let b = q.b + 16.0 * h.b;
            if FORMAT == GPU_Q5_0 {
                let d = half_scale(blk);
                return W8((a - 16.0) * d, (b - 16.0) * d);
            }
            let dm = halves(w_scales[blk]);
            return W8(a * dm.x + dm.y, b * dm.x + dm.y);
        }
        case GPU_IQ4_NL, GPU_MXFP4: {
            // Nibbles indexing fixed levels: IQ4_NL's with an f16 scale, MXFP4's
            // (E2M1, doubled) with its E8M0 scale as f32 bits, a word per block.
            load_lut(row);
            let o = base + (part % 2u) * 2u;
            let shift = select(0u, 4u, part >= 2u);
            var d: f32;
            if FORMAT == GPU_MXFP4 {
                d = bitcast<f32>(w_scales[blk]);
            } else {
                d = half_scale(blk);
            }
            return W8(pick(nibbles_u(w_qs[o], shift)) * d, pick(nibbles_u(w_qs[o + 1u], shift)) * d);
        }
        case GPU_Q2_K, GPU_Q3_K, GPU_Q4_K, GPU_Q5_K, GPU_Q6_K: {
            return k_quant8(blk, base, part);
        }
        default: {
            // Q4_0, Q4_1: byte j holds value j (low nibble) and j + 16 (high nibble).
            let q = nibbles8(base, part);
            if FORMAT == GPU_Q4_0 {
                let d = half_scale(blk);
                return W8((q.a - 8.0) * d, (q.b - 8.0) * d);
            }
            let dm = halves(w_scales[blk]);
            return W8(q.a * dm.x + dm.y, q.b * dm.x + dm.y);
        }
    }
}
