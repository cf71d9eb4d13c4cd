// Included by kernels that sum one value per thread over their workgroup (an RMS
// norm's sum of squares): a tree in workgroup memory, the same order every time.

var<workgroup> sums: array<f32, 256>;

// The sum of `v` over threads 0..n (n a power of two, at most 256, the threads that
// call it): every one of them must call it, in uniform control flow (barriers).
fn workgroup_sum(lid: u32, v: f32, n: u32) -> f32 {
    sums[lid] = v;
    workgroupBarrier();
    for (var k = n / 2u; k > 0u; k >>= 1u) {
        if lid < k {
            sums[lid] += sums[lid + k];
        }
        workgroupBarrier();
    }
    let total = sums[0];
    workgroupBarrier(); // sums is free for the next call
    return total;
}
