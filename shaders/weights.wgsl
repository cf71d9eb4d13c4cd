// Included by the matmul and embedding kernels: weight rows as packed by
// src/quant/gpu_layout.rs, dequantized eight values at a time in registers.
// FORMAT: 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q4_1, 5 palettized 4-bit, 6 palettized
// 2-bit. Blocks hold 32 values.

override FORMAT: u32 = 4u;
// Palettes: rows sharing one table (f16 entries, two a word, in w_scales).
override LUT_ROWS: u32 = 16u;

@group(0) @binding(1) var<storage, read> w_qs: array<u32>;
@group(0) @binding(2) var<storage, read> w_scales: array<u32>;

struct W8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

fn qs_words() -> u32 {
    switch FORMAT {
        case 0u: { return 32u; }
        case 1u: { return 16u; }
        case 2u: { return 8u; }
        case 6u: { return 2u; }
        default: { return 4u; }
    }
}

// Block `blk`'s f16 scale, two to a word.
fn half_scale(blk: u32) -> f32 {
    let h = unpack2x16float(w_scales[blk / 2u]);
    return select(h.x, h.y, (blk & 1u) == 1u);
}

fn nibbles(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(vec4<u32>(
        (w >> shift) & 15u, (w >> (shift + 8u)) & 15u,
        (w >> (shift + 16u)) & 15u, (w >> (shift + 24u)) & 15u));
}

fn bytes_i8(w: u32) -> vec4<f32> {
    let s = bitcast<i32>(w);
    return vec4<f32>(vec4<i32>(
        extractBits(s, 0u, 8u), extractBits(s, 8u, 8u),
        extractBits(s, 16u, 8u), extractBits(s, 24u, 8u)));
}

// The current row group's table, held in registers: a thread reads one row's blocks
// in turn, so it is loaded once per row (group) rather than once per weight.
var<private> lut: array<f32, 16>;
var<private> lut_group: u32 = 0xffffffffu;

fn load_lut(row: u32) {
    let g = row / LUT_ROWS;
    if g == lut_group {
        return;
    }
    lut_group = g;
    let words = select(2u, 8u, FORMAT == 5u);
    for (var i = 0u; i < words; i++) {
        let h = unpack2x16float(w_scales[g * words + i]);
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
    if FORMAT == 6u {
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

// Values part*8 .. part*8+7 of block `b` of row `row` (rows of `nb` blocks; part 0..3).
fn weight8(row: u32, nb: u32, b: u32, part: u32) -> W8 {
    let blk = row * nb + b;
    let base = blk * qs_words();
    switch FORMAT {
        case 5u: {
            load_lut(row);
            return lut8(w_qs[base + part], 0u, 4u);
        }
        case 6u: {
            load_lut(row);
            return lut8(w_qs[base + part / 2u], (part % 2u) * 16u, 2u);
        }
        case 0u: {
            let o = base + part * 8u;
            return W8(
                vec4<f32>(bitcast<f32>(w_qs[o]), bitcast<f32>(w_qs[o + 1u]),
                          bitcast<f32>(w_qs[o + 2u]), bitcast<f32>(w_qs[o + 3u])),
                vec4<f32>(bitcast<f32>(w_qs[o + 4u]), bitcast<f32>(w_qs[o + 5u]),
                          bitcast<f32>(w_qs[o + 6u]), bitcast<f32>(w_qs[o + 7u])));
        }
        case 1u: {
            let o = base + part * 4u;
            return W8(
                vec4<f32>(unpack2x16float(w_qs[o]), unpack2x16float(w_qs[o + 1u])),
                vec4<f32>(unpack2x16float(w_qs[o + 2u]), unpack2x16float(w_qs[o + 3u])));
        }
        case 2u: {
            let o = base + part * 2u;
            let d = half_scale(blk);
            return W8(bytes_i8(w_qs[o]) * d, bytes_i8(w_qs[o + 1u]) * d);
        }
        default: {
            // 4-bit: byte j holds value j (low nibble) and j + 16 (high nibble).
            let o = base + (part % 2u) * 2u;
            let shift = select(0u, 4u, part >= 2u);
            let a = nibbles(w_qs[o], shift);
            let b = nibbles(w_qs[o + 1u], shift);
            if FORMAT == 3u {
                let d = half_scale(blk);
                return W8((a - 8.0) * d, (b - 8.0) * d);
            }
            let dm = unpack2x16float(w_scales[blk]);
            return W8(a * dm.x + dm.y, b * dm.x + dm.y);
        }
    }
}
