#pragma once
// The part of an attention mask row that is not -inf: the keys a query sees.
// Kernels skip the rest, whose outputs the mask fixes whatever they compute.
#include <cmath>
#include <cstdint>

#include "ggml.h"
#include "kernels/span.h"
#include "kernels/x86_target.h"

namespace ggspec {

// Whether a mask can be read as kernels read it: F32 [n_keys, n_rows], contiguous,
// one row per query (shared by every head).
inline bool attention_mask_fits(const ggml_tensor * mask, int64_t n_keys, int64_t n_rows) {
    return mask && mask->type == GGML_TYPE_F32 && ggml_is_contiguous(mask) && mask->ne[0] == n_keys &&
           mask->ne[1] == n_rows && ggml_nrows(mask) == n_rows;
}

#if GGSPEC_X86_KERNEL
// Whether the 8 entries of a mask row from i are all -inf.
GGSPEC_AVX2 inline bool masked8(const float * mask, int64_t i) {
    const __m256 equal = _mm256_cmp_ps(_mm256_loadu_ps(mask + i), _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
    return _mm256_movemask_ps(equal) == 0xff;
}

// The entries of a mask row of n from the first to the last that is not -inf
// (empty when all are).
GGSPEC_AVX2 inline Span unmasked(const float * mask, int64_t n) {
    Span s{0, n};
    while (s.lo + 8 <= s.hi && masked8(mask, s.lo)) s.lo += 8;
    while (s.lo < s.hi && mask[s.lo] == -INFINITY) ++s.lo;
    while (s.hi - 8 >= s.lo && masked8(mask, s.hi - 8)) s.hi -= 8;
    while (s.hi > s.lo && mask[s.hi - 1] == -INFINITY) --s.hi;
    return s;
}
#endif

}  // namespace ggspec
