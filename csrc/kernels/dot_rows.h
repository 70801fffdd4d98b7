#pragma once
// What every multi-row kernel shares: the job (quantized weight rows against
// activation rows in the weights' vec_dot_type, each output equal to ggml's
// vec_dot), ggml's float helpers, and the loop over activation chunks and
// weight tiles.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/quantize_q8_k.h"
#include "kernels/x86_target.h"

namespace ggspec {

struct DotRowsJob {
    ggml_type weight_type;
    const void * weights;  // rows row_bytes apart
    size_t row_bytes;
    const uint8_t * acts;  // activation rows, act_bytes apart: F32, or already in act_type when quantized
    size_t act_bytes;
    ggml_type act_type;    // what ggml_mul_mat quantizes them to: the weights' vec_dot_type
    int64_t n_blocks;      // quant blocks per row (of 32 values, or 256 for the K-quants)
    int64_t n_acts;
    float * dst;           // dst[a * dst_stride + w]
    int64_t dst_stride;
    // Attention's mask, added to the product after it (F32, row a at
    // mask + a * mask_stride): an output whose entry is -inf ends at -inf
    // whatever its value, so a kernel may write 0 there instead of computing it.
    const float * mask = nullptr;
    int64_t mask_stride = 0;
    bool quantized = false;  // acts are in act_type already (a graph op quantized them once for all threads)
};

// Activation rows [first, end) of a job in its act_type, contiguous.
struct ActRows {
    const uint8_t * data;
    size_t row_bytes;
    int64_t first, end;
    const uint8_t * row(int64_t a) const { return data + (size_t) (a - first) * row_bytes; }
};

// Storage that starts on a cache line. malloc's 16-byte alignment put the
// 32-byte activation blocks of q8_dot_rows_vnni across two lines every other
// load: Gemma 3's 8-row Q8_0 LM head ran 5% slower.
template <class T>
struct CacheLineAllocator {
    using value_type = T;
    CacheLineAllocator() = default;
    template <class U>
    CacheLineAllocator(const CacheLineAllocator<U> &) {}
    T * allocate(size_t n) { return static_cast<T *>(::operator new(n * sizeof(T), std::align_val_t(64))); }
    void deallocate(T * p, size_t) { ::operator delete(p, std::align_val_t(64)); }
    template <class U>
    bool operator==(const CacheLineAllocator<U> &) const { return true; }
    template <class U>
    bool operator!=(const CacheLineAllocator<U> &) const { return false; }
};

template <class T>
using Buffer = std::vector<T, CacheLineAllocator<T>>;

// This thread's buffer number Id of Ts, reused across calls (a thread runs one
// job at a time, so kernels may share them). Kernels take a reference once per
// job: each lookup of a thread_local in a shared library is a call.
template <class T, int Id = 0>
Buffer<T> & thread_buffer() {
    static thread_local Buffer<T> buffer;
    return buffer;
}

// The quantizer the kernels use for an activation type: ggml's own from_float,
// but for Q8_K a vectorized copy with its bits (x86 builds, like the kernels).
inline ggml_from_float_t kernel_from_float(ggml_type act_type) {
#if GGSPEC_X86_KERNEL
    if (act_type == GGML_TYPE_Q8_K) return quantize_q8_k;
#endif
    return ggml_get_type_traits_cpu(act_type)->from_float;
}

// Rows [a0, a_end) of the job's activations quantized as ggml_mul_mat quantizes
// them (kernel_from_float, row by row): the job's own rows when a graph op
// quantized them, else this thread's buffer (attention's products, where each
// thread needs other heads' rows).
inline ActRows quantize_acts(const DotRowsJob & job, int64_t a0, int64_t a_end) {
    if (job.quantized) return {job.acts + (size_t) a0 * job.act_bytes, job.act_bytes, a0, a_end};
    Buffer<uint8_t> & buffer = thread_buffer<uint8_t>();
    const int64_t k = job.n_blocks * ggml_blck_size(job.weight_type);
    const size_t row_bytes = ggml_row_size(job.act_type, k);
    if (buffer.size() < row_bytes * (size_t) (a_end - a0)) buffer.resize(row_bytes * (size_t) (a_end - a0));
    const ggml_from_float_t from_float = kernel_from_float(job.act_type);
    for (int64_t a = a0; a < a_end; ++a) {
        from_float((const float *) (job.acts + a * job.act_bytes), buffer.data() + (a - a0) * row_bytes, k);
    }
    return {buffer.data(), row_bytes, a0, a_end};
}

constexpr int64_t kActChunk = 64;  // activation rows prepared at a time, so that they stay in L2

inline uint16_t load_u16(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

// IQ4_NL's 16 values (IQ4_XS shares them), as ggml's own dequantizer gives them.
inline const int8_t * iq4_values() {
    static const auto table = [] {
        std::array<int8_t, 16> values{};
        uint8_t block[18] = {0x00, 0x3C};  // d = 1.0 in F16; nibbles 0..15 in values 0..15
        for (int i = 0; i < 16; ++i) block[2 + i] = (uint8_t) i;
        float out[32];
        ggml_get_type_traits(GGML_TYPE_IQ4_NL)->to_float(block, out, 32);
        for (int i = 0; i < 16; ++i) values[i] = (int8_t) out[i];
        return values;
    }();
    return table.data();
}

// ggml's hsum_float_8 over 8 lanes, in its order.
inline float hsum8(const float * l) {
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    return (a0 + a2) + (a1 + a3);
}

#if GGSPEC_X86_KERNEL
// The lane sums of 8 outputs' 8-lane accumulators at once (lane i of the result:
// v[i]'s), each in one of ggml's orders: low half + high half lane by lane (t,
// 4 lanes), then hsum_float_8's (t0 + t2) + (t1 + t3), or with Hadds the F16
// dot's two hadds, (t0 + t1) + (t2 + t3). Transposed, so that the 8 share each
// instruction; v[i] meets v[i + 4] first, which leaves the outputs in order.
template <bool Hadds>
__attribute__((always_inline)) GGSPEC_AVX2 inline __m256 lane_sums8(const __m256 * v) {
    __m256 t[4];  // [t of v_i | t of v_i+4]
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[i], v[i + 4], 0x20),
                             _mm256_permute2f128_ps(v[i], v[i + 4], 0x31));
    }
    __m256 u[2];  // each output's two pair sums
    for (int i = 0; i < 2; ++i) {
        if constexpr (Hadds) {  // t0 + t1, t2 + t3
            u[i] = _mm256_hadd_ps(t[2 * i], t[2 * i + 1]);
        } else {  // t0 + t2, t1 + t3
            u[i] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        }
    }
    return _mm256_hadd_ps(u[0], u[1]);
}

// Dword i of 8 rows' blocks, row r in lane r, for each i: an 8 x 8 transpose
// (the block orders' activations, a row per lane).
GGSPEC_AVX2 inline void transpose8(__m256i (&v)[8]) {
    __m256i t[8], u[8];
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_epi32(v[k], v[k + 1]);
        t[k + 1] = _mm256_unpackhi_epi32(v[k], v[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {  // rows k..k+3: dwords (0, 4), (1, 5), (2, 6), (3, 7) by lane half
        u[k] = _mm256_unpacklo_epi64(t[k], t[k + 2]);
        u[k + 1] = _mm256_unpackhi_epi64(t[k], t[k + 2]);
        u[k + 2] = _mm256_unpacklo_epi64(t[k + 1], t[k + 3]);
        u[k + 3] = _mm256_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
        v[4 + i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
    }
}

// Lane i: the sum of v[i]'s 8 lanes (integers: any order is exact).
GGSPEC_AVX2 inline __m256i int_sums8(const __m256i * v) {
    __m256i t[4];  // [v_i's halves summed | v_i+4's]
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm256_add_epi32(_mm256_permute2x128_si256(v[i], v[i + 4], 0x20),
                                _mm256_permute2x128_si256(v[i], v[i + 4], 0x31));
    }
    return _mm256_hadd_epi32(_mm256_hadd_epi32(t[0], t[1]), _mm256_hadd_epi32(t[2], t[3]));
}

// The sum of 8 integer lanes (exact in any order).
inline GGSPEC_AVX2 int32_t sum_int_lanes(__m256i lanes) {
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
    const __m128i t = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
}
#endif

// Keeps a value loaded once in its register: GCC would otherwise fold the load
// into every instruction that reads it, and the loads would bound the tile.
// The asm names a copy: naming v itself, where v was an array element, kept
// the whole array in memory (GCC does not split an aggregate an asm names),
// and each block of a tile stored its weight vectors to the stack, dead.
template <class T>
inline void in_register(T & v) {
    T copy = v;
    __asm__("" : "+v"(copy));
    v = copy;
}

// How far ahead of the rows being multiplied their weight lines are requested:
// on Gemma 3's Q8_0 LM head one row at a time 4-8 KB gave the most (2 KB 8.2
// ms, 4 KB 8.1, 8 KB 7.8, none 12.7), beyond the hardware prefetcher's reach,
// and a tile of rows ahead (1.4 KB of SmolLM2's Q4_1 rows) left the memory's
// latency in the decode of each tile.
constexpr int64_t kFetchAhead = 6144;

// The weight stream fetched kFetchAhead bytes ahead of the tile being computed,
// spread over the tile's block loop: decode-then-compute would otherwise leave
// the memory idle during the compute and the cores idle during the read. The
// lines go to L2, not L1, where the stream evicted the tile's own working set:
// on a Zen 4, 2 threads, paired processes, one-row steps were 10% faster on
// Gemma 3 270M and SmolLM2-135M, and Gemma's 8-row verify 6%. A kernel that
// reads 4-bit blocks where they are stored asks for L1 (to_l1; see
// q8_block_order_vnni.cpp).
class WeightStream {
public:
    void to_l1(bool l1) { l1_ = l1; }
    // A new pass over the weights [begin, end).
    void start(const uint8_t * begin, const uint8_t * end) {
        fetched_ = target_ = (uintptr_t) begin & ~(uintptr_t) 63, end_ = (uintptr_t) end;
    }
    // The tile now computed ends at tile_end and loops over n_blocks blocks.
    void next_tile(const uint8_t * tile_end, int64_t n_blocks) {
        fetched_ = target_;  // the previous tile's fetches, all issued
        target_ = std::min(end_, (uintptr_t) tile_end + (uintptr_t) kFetchAhead);
        n_blocks_ = n_blocks;
        spread(1);
    }
    // The tile runs its block loop `loops` times: fetch(loop * n_blocks + b)
    // then takes its share. A kernel that fetched the whole stretch in its
    // first loop would bunch the requests, and lose some of them.
    void spread(int64_t loops) {
        const int64_t bytes = target_ > fetched_ ? (int64_t) (target_ - fetched_) : 0;
        per_block_ = (bytes / std::max<int64_t>(1, n_blocks_ * loops) + 63) / 64 * 64;
    }
    // Block b's share of the lines. Inlined where it is called: GCC finds a
    // function that only prefetches pure and may drop its calls (see
    // half_dot_rows' tile_rows).
    __attribute__((always_inline)) void fetch(int64_t b) const {
        const uintptr_t first = fetched_ + (uintptr_t) (b * per_block_);
        const uintptr_t last = std::min(target_, first + (uintptr_t) per_block_);
        if (l1_) {
            for (uintptr_t line = first; line < last; line += 64) __builtin_prefetch((const void *) line, 0, 3);  // prefetcht0
            return;
        }
        for (uintptr_t line = first; line < last; line += 64) __builtin_prefetch((const void *) line, 0, 2);  // prefetcht1
    }

private:
    bool l1_ = false;
    uintptr_t fetched_ = 0, target_ = 0, end_ = 0;
    int64_t n_blocks_ = 1, per_block_ = 0;
};

// Weight rows [w_begin, w_end) against every activation row: activation rows in
// chunks of kActChunk, each quantized and prepared once (kernel.prepare(acts)); weight
// rows in tiles of TileW, each row decoded once into a tile slot
// (kernel.decode(w, slot)); then kernel.run<TileW>(w0, 0, a0, a_end) for a full
// tile, or kernel.run<1>(w, slot, a0, a_end) for each row of a partial one,
// whose block loops call kernel.stream.fetch(b).
template <int TileW, class Kernel>
void run_tiles(Kernel & kernel, const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    const uint8_t * weights = (const uint8_t *) job.weights;
    for (int64_t a0 = 0; a0 < job.n_acts; a0 += kActChunk) {
        const int64_t a_end = std::min(job.n_acts, a0 + kActChunk);
        kernel.prepare(quantize_acts(job, a0, a_end));
        kernel.stream.start(weights + w_begin * job.row_bytes, weights + w_end * job.row_bytes);
        for (int64_t w = w_begin; w < w_end; w += TileW) {
            const int64_t n_w = std::min<int64_t>(TileW, w_end - w);
            for (int64_t i = 0; i < n_w; ++i) kernel.decode(w + i, i);
            kernel.stream.next_tile(weights + (w + n_w) * job.row_bytes, job.n_blocks);
            if (n_w == TileW) {
                kernel.template run<TileW>(w, 0, a0, a_end);
            } else {
                for (int64_t i = 0; i < n_w; ++i) kernel.template run<1>(w + i, i, a0, a_end);
            }
        }
    }
}

}  // namespace ggspec
