#pragma once
// Half-open ranges of indices, and the contiguous share of one a thread takes.
#include <algorithm>
#include <cstdint>

namespace ggspec {

// A half-open range [lo, hi); empty when lo >= hi.
struct Span {
    int64_t lo, hi;
};

// Thread ith of nth's share of [0, total): ceil(total / nth) items each, so
// that the last shares are shorter or empty. ggml's element-wise ops (add,
// mul) split rows so too: an op that reads a row on the thread that wrote it
// (the norm after the residual add, the quantizer after them) must agree, and
// a product's reserve is the back of this share (RunDealer).
inline Span fixed_share(int ith, int nth, int64_t total) {
    const int64_t per = (total + nth - 1) / nth, lo = std::min(total, ith * per);
    return {lo, std::min(total, lo + per)};
}

}  // namespace ggspec
