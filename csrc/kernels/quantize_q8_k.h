#pragma once
// ggml's Q8_K activation quantizer (quantize_row_q8_K_ref, which its x86 CPU
// backend uses as is), vectorized with the same bits: the first value of the
// largest magnitude sets iscale = -127 / max, each value becomes the mantissa of
// iscale * x + 1.5 * 2^23 (a multiply and an add, not an FMA), at most 127, and
// each 16 values' sum is kept; d = 1 / iscale. The multi-row kernels quantize
// the activation rows they need on every thread, where ggml's scalar loop would
// cost more than the K-quant products of a verify.
#include <cstdint>

namespace ggspec {

// k values (a multiple of 256) into k / 256 blocks of block_q8_K (292 bytes).
// x86 builds only, like the kernels that call it.
void quantize_q8_k(const float * x, void * out, int64_t k);

}  // namespace ggspec
