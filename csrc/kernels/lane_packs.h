#pragma once
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K weights repacked 16 rows to a register,
// for the block orders (path vnni-block; q8_dot_rows.h, k_block_order.h). The block order takes each
// block's integer dot whole, so its rows can sit in lanes: a 16-lane dpbusd
// multiplies 16 weight rows' dword of values by one activation dword broadcast
// from memory, and one cvt, one vmulps and one FMA (two with a min) finish a
// block of 16 outputs. The stored layout keeps a row's blocks together; then
// the kernel spends a broadcast per dpbusd to spread one row's dword across an
// activation group's lanes, and a cvt and an FMA per 8 outputs. The same
// bits: every output takes the block order's steps in its order.
#include <memory>
#include <mutex>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "kernels/dot_rows.h"

namespace ggspec {

constexpr int64_t kLaneRows = 16;  // weight rows a packed group holds, one per lane

inline bool lane_packs_handle(ggml_type t) {
    return t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1 ||
           t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_K;
}

// A packed group's block: the 16 rows' d (then, for Q4_1 and Q5_1, m) in F16;
// for Q5_0 and Q5_1 their 32 fifth bits (qh), a dword a lane; then their 16
// bytes of nibbles as 4 vectors, vector j lane r holding row r's bytes
// 4j..4j+3 (for Q8_0 its 32 values plus 128, as dpbusd's unsigned bytes, in 8
// such vectors). A Q4_K block (256 values): the rows' d and dmin in F16, its 8
// sub-blocks' 6-bit scales (sub-block s at 16 s, a byte a row), then their mins
// likewise, then its 128 bytes of nibbles as 32 such vectors, pair i of
// sub-blocks (2i in the low nibbles, 2i + 1 in the high ones) in vectors 8i..8i+7.
// Group g's blocks follow one another; whole groups only.
constexpr bool lane_has_min(ggml_type t) { return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1; }
constexpr bool lane_has_fifth(ggml_type t) { return t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1; }
constexpr int64_t lane_header_bytes(ggml_type t) {
    if (t == GGML_TYPE_Q4_K) return 64 + 2 * 128;
    return 32 + (lane_has_min(t) ? 32 : 0) + (lane_has_fifth(t) ? 64 : 0);
}
constexpr int64_t lane_block_bytes(ggml_type t) {
    return lane_header_bytes(t) + (t == GGML_TYPE_Q4_K ? 2048 : t == GGML_TYPE_Q8_0 ? 512 : 256);
}
size_t lane_pack_bytes(ggml_type t, int64_t n_rows, int64_t n_blocks);
void lane_pack(ggml_type t, const uint8_t * weights, size_t row_bytes, int64_t n_rows, int64_t n_blocks, uint8_t * out);

// The whole groups of weight rows [w_begin, w_end) (w_begin a multiple of 16)
// against every activation row in the block order, from their packed copy;
// returns where they end: the rows from there are the stored kernel's.
int64_t lane_dot_rows_vnni(const DotRowsJob & job, const uint8_t * packed, int64_t w_begin, int64_t w_end);

// The packed copies of a model's weights in private memory, made at a graph's
// first product of each and kept while the model is.
class LanePacks {
public:
    LanePacks() = default;
    LanePacks(const LanePacks &) = delete;
    LanePacks & operator=(const LanePacks &) = delete;
    ~LanePacks();
    // w [k, n] packed (an I8 tensor), or null where w is not a matrix of 16
    // rows or more of a type packed here (lane_packs_handle), in host memory.
    ggml_tensor * get(const ggml_tensor * w);
    // Whether the weights are the file's read-only mapping, whose pages a pack
    // then drops from the process (they are read back from the file if a
    // product of the rows after the last group, or an embedding lookup, needs
    // them). Never for weights in private memory, which that would zero.
    void drop_file_pages(bool mapped) { drop_file_pages_ = mapped; }
    size_t bytes() {
        std::lock_guard<std::mutex> lock(mutex_);
        return bytes_;
    }

private:
    // Packs share chunks of private memory, each from a huge page's boundary
    // for the kernel to back with huge pages (MADV_HUGEPAGE), as it does a copy
    // of the weights; a pack to a mapping of its own would commit a huge page
    // for each small matrix. Pages are committed as they are written.
    struct Chunk {
        void * memory;
        size_t mapped;
        uint8_t * data;
        size_t size, used;
        ggml_backend_buffer_t buffer;
    };
    struct Pack {
        const ggml_tensor * weight;
        ggml_context * ctx;
        ggml_tensor * packed;
    };
    uint8_t * allocate(size_t bytes, const ggml_tensor * w);
    std::vector<Chunk> chunks_;
    std::mutex mutex_;
    std::vector<Pack> packs_;
    size_t bytes_ = 0;
    bool drop_file_pages_ = false;
};

}  // namespace ggspec
