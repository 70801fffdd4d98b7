#pragma once
// What both AVX512-VNNI kernels of q8_dot_rows.h read weight blocks with:
// dpbusd multiplies unsigned bytes by signed ones, so each block's 32 values
// are decoded to unsigned bytes, in registers or into a pass (WeightBlock).
#include "kernels/q8_dot_rows.h"
#include "kernels/x86_target.h"

#if GGSPEC_X86_KERNEL

namespace ggspec {
namespace q8_vnni {

// A weight block decoded for dpbusd, which multiplies unsigned bytes by signed
// ones: u = x + 128 for the signed types (the activations' correction takes the
// 128 back out), u = x for Q4_1 and Q5_1, whose values are unsigned.
struct WeightBlock {
    uint8_t u[kQ8Block];
    float d;
    float m;  // follows d: Q4_1 and Q5_1 convert both at once
};

constexpr bool signed_values(ggml_type t) { return !q8_has_min(t); }

inline GGSPEC_AVX512 __m256i low_high_nibbles(const uint8_t * qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *) qs);
    const __m128i mask = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
}

inline GGSPEC_AVX512 __m256i fifth_bits(const uint8_t * qh) {  // 0x10 where Q5's high bit is set
    uint32_t bits;
    std::memcpy(&bits, qh, 4);
    return _mm256_maskz_mov_epi8((__mmask32) bits, _mm256_set1_epi8(0x10));
}

// Block layouts (ggml-common.h): q8_0 {d, qs[32]}, q4_0 {d, qs[16]}, q5_0 {d, qh[4], qs[16]},
// q4_1 {d, m, qs[16]}, q5_1 {d, m, qh[4], qs[16]}, iq4_nl {d, qs[16]}; values 0..15 sit in
// the low nibbles, 16..31 in the high ones.
template <ggml_type T>
constexpr size_t block_bytes() {
    switch (T) {
        case GGML_TYPE_Q8_0: return 34;
        case GGML_TYPE_Q5_0: return 22;
        case GGML_TYPE_Q4_1: return 20;
        case GGML_TYPE_Q5_1: return 24;
        default: return 18;  // Q4_0, IQ4_NL
    }
}

// A block's 32 values as dpbusd's unsigned bytes.
template <ggml_type T>
GGSPEC_AVX512 inline __m256i unsigned_values(const uint8_t * block) {
    __m256i x;
    if constexpr (T == GGML_TYPE_Q8_0) {
        x = _mm256_loadu_si256((const __m256i *) (block + 2));
    } else if constexpr (T == GGML_TYPE_IQ4_NL) {  // x = the table's value for the nibble
        const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) iq4_values()));
        x = _mm256_shuffle_epi8(table, low_high_nibbles(block + 2));
    } else if constexpr (T == GGML_TYPE_Q4_0) {  // x = nibble - 8, so x + 128 = nibble + 120
        return _mm256_add_epi8(low_high_nibbles(block + 2), _mm256_set1_epi8(120));
    } else if constexpr (T == GGML_TYPE_Q5_0) {  // x = (nibble | high bit << 4) - 16: x + 128 = that + 112
        return _mm256_add_epi8(_mm256_or_si256(low_high_nibbles(block + 6), fifth_bits(block + 2)),
                               _mm256_set1_epi8(112));
    } else if constexpr (T == GGML_TYPE_Q4_1) {  // x = nibble, scaled by d, plus m
        return low_high_nibbles(block + 4);
    } else {  // Q5_1: x = nibble | high bit << 4, scaled by d, plus m
        return _mm256_or_si256(low_high_nibbles(block + 8), fifth_bits(block + 4));
    }
    return _mm256_xor_si256(x, _mm256_set1_epi8((char) 0x80));  // x + 128
}

template <ggml_type T>
inline GGSPEC_AVX512 void decode_row(const uint8_t * row, int64_t n_blocks, WeightBlock * out) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t * block = row + b * block_bytes<T>();
        WeightBlock & wb = out[b];
        _mm256_storeu_si256((__m256i *) wb.u, unsigned_values<T>(block));
        if constexpr (signed_values(T)) {
            wb.d = _cvtsh_ss(load_u16(block));
        } else {
            uint32_t dm;
            std::memcpy(&dm, block, 4);
            _mm_storel_pi((__m64 *) &wb.d, _mm_cvtph_ps(_mm_cvtsi32_si128((int) dm)));
        }
    }
}

using DecodeRow = void (*)(const uint8_t *, int64_t, WeightBlock *);

inline DecodeRow decoder(ggml_type t) {
    switch (t) {
        case GGML_TYPE_IQ4_NL: return decode_row<GGML_TYPE_IQ4_NL>;
        case GGML_TYPE_Q4_0: return decode_row<GGML_TYPE_Q4_0>;
        case GGML_TYPE_Q5_0: return decode_row<GGML_TYPE_Q5_0>;
        case GGML_TYPE_Q4_1: return decode_row<GGML_TYPE_Q4_1>;
        case GGML_TYPE_Q5_1: return decode_row<GGML_TYPE_Q5_1>;
        default: return decode_row<GGML_TYPE_Q8_0>;
    }
}

// How a tile reads its weight blocks. Decoded: from the WeightBlocks a pass
// wrote before it, once for every group of 8 activation rows that meets them
// (a prefill chunk has 8). Stored<T>: where they are stored, each block decoded
// in registers for each group, which costs the single group of a verify less:
// at 8 rows (4 rows) Q4_1's products ran 10% (15%) faster, Q4_0's and Q5_0's
// 10% (16-22%), Q5_1's the same (8%), and Q4_1's 6% slower at 64 (2 threads,
// 1536 x 576 weights). IQ4_NL's table lookup keeps its pass: in place it ran
// 22-38% slower. Q8_0 is always read in place: its decode is one xor, and a
// pass that stored it cost Gemma 3's 8-row LM head 15% more. Signed: values
// offset by 128, which the activations' correction takes back out. Paired:
// IQ4_NL's two passes over its blocks in vec_dot's order (see q8_blocks_paired).
// (The block order's paired and narrow tiles read the stored blocks unless the
// chunk's wide groups made the pass; its wide tiles read a pass, but for a
// verify's single group of Q8_0, or up to 4 groups of Q4_0 or Q4_1, which they
// read in place.)
template <bool SignedValues, bool PairedBlocks = false>
struct Decoded {
    static constexpr bool Signed = SignedValues, Paired = PairedBlocks, in_place = false;
    static constexpr ggml_type type = GGML_TYPE_COUNT;  // any type of its kind
};

template <ggml_type T>
struct Stored {
    static constexpr bool Signed = signed_values(T), Paired = q8_blocks_paired(T), in_place = true;
    static constexpr ggml_type type = T;
};

// f(source), source the way a kernel's tiles read weights of type t: as stored
// where in_place (never IQ4_NL), else decoded.
template <class F>
inline void with_weight_source(ggml_type t, bool in_place, F && f) {
    if (in_place) {
        switch (t) {
            case GGML_TYPE_Q8_0: return f(Stored<GGML_TYPE_Q8_0>{});
            case GGML_TYPE_Q4_0: return f(Stored<GGML_TYPE_Q4_0>{});
            case GGML_TYPE_Q5_0: return f(Stored<GGML_TYPE_Q5_0>{});
            case GGML_TYPE_Q4_1: return f(Stored<GGML_TYPE_Q4_1>{});
            case GGML_TYPE_Q5_1: return f(Stored<GGML_TYPE_Q5_1>{});
            default: break;
        }
    }
    if (q8_has_min(t)) return f(Decoded<false>{});
    if (q8_blocks_paired(t)) return f(Decoded<true, true>{});
    f(Decoded<true>{});
}

// Weight rows as a tile reads them: decoded, n_blocks apart, or as stored,
// row_bytes apart. Block b of row w gives dpbusd's unsigned bytes, its scale d
// and (Q4_1, Q5_1) its min m.
struct TileRows {
    const WeightBlock * decoded;
    const uint8_t * stored;
    size_t row_bytes;
    int64_t n_blocks;

    TileRows from(int w) const { return {decoded + w * n_blocks, stored + w * row_bytes, row_bytes, n_blocks}; }
    template <class F>
    inline GGSPEC_AVX512 __m256i block_values(int w, int64_t b) const {
        if constexpr (F::in_place) return unsigned_values<F::type>(block<F>(w, b));
        return _mm256_loadu_si256((const __m256i *) decoded[w * n_blocks + b].u);
    }
    template <class F>
    inline GGSPEC_AVX512 float block_scale(int w, int64_t b) const {
        if constexpr (F::in_place) return _cvtsh_ss(load_u16(block<F>(w, b)));
        return decoded[w * n_blocks + b].d;
    }
    template <class F>
    inline GGSPEC_AVX512 float block_min(int w, int64_t b) const {
        if constexpr (F::in_place) return _cvtsh_ss(load_u16(block<F>(w, b) + 2));
        return decoded[w * n_blocks + b].m;
    }

private:
    template <class F>
    const uint8_t * block(int w, int64_t b) const { return stored + w * row_bytes + b * block_bytes<F::type>(); }
};

}  // namespace q8_vnni
}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
