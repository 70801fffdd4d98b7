#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "errors.h"
#include "ggml-cpu.h"
#include "kernels/lane_packs.h"

namespace ggspec {

size_t lane_pack_bytes(ggml_type t, int64_t n_rows, int64_t n_blocks) {
    return (size_t) (n_rows / kLaneRows * n_blocks * lane_block_bytes(t));
}

void lane_pack(ggml_type t, const uint8_t * weights, size_t row_bytes, int64_t n_rows, int64_t n_blocks,
               uint8_t * out) {
    // a stored block (ggml-common.h): d, then m, then qh[4], then qs[16]
    const size_t m = 2, qh = lane_has_min(t) ? 4 : 2, qs = qh + (lane_has_fifth(t) ? 4 : 0);
    const size_t stored = ggml_type_size(t);
    for (int64_t g = 0; g < n_rows / kLaneRows; ++g) {
        for (int64_t b = 0; b < n_blocks; ++b, out += lane_block_bytes(t)) {
            for (int64_t r = 0; r < kLaneRows; ++r) {
                const uint8_t * block = weights + (size_t) (g * kLaneRows + r) * row_bytes + (size_t) b * stored;
                if (t == GGML_TYPE_Q4_K) {  // d, dmin, scales[12], qs[128]
                    std::memcpy(out + 2 * r, block, 2);
                    std::memcpy(out + 32 + 2 * r, block + 2, 2);
                    const uint8_t * q = block + 4;  // ggml's get_scale_min_k4
                    for (int sub = 0; sub < 8; ++sub) {
                        out[64 + 16 * sub + r] = sub < 4 ? q[sub] & 63 : (q[sub + 4] & 0xF) | (q[sub - 4] >> 6) << 4;
                        out[192 + 16 * sub + r] = sub < 4 ? q[sub + 4] & 63 : (q[sub + 4] >> 4) | (q[sub] >> 6) << 4;
                    }
                    for (int v = 0; v < 32; ++v) std::memcpy(out + 320 + 64 * v + 4 * r, block + 16 + 4 * v, 4);
                    continue;
                }
                if (t == GGML_TYPE_Q8_0) {  // d, then qs[32] as x + 128
                    std::memcpy(out + 2 * r, block, 2);
                    for (int j = 0; j < 8; ++j) {
                        uint32_t v;
                        std::memcpy(&v, block + 2 + 4 * j, 4);
                        v ^= 0x80808080u;
                        std::memcpy(out + 32 + 64 * j + 4 * r, &v, 4);
                    }
                    continue;
                }
                uint8_t * at = out;
                std::memcpy(at + 2 * r, block, 2);
                at += 32;
                if (lane_has_min(t)) std::memcpy(at + 2 * r, block + m, 2), at += 32;
                if (lane_has_fifth(t)) std::memcpy(at + 4 * r, block + qh, 4), at += 64;
                for (int j = 0; j < 4; ++j) std::memcpy(at + 64 * j + 4 * r, block + qs + 4 * j, 4);
            }
        }
    }
}

LanePacks::~LanePacks() {
    for (const Pack & p : packs_) ggml_free(p.ctx);
    for (const Chunk & c : chunks_) {
        ggml_backend_buffer_free(c.buffer);
        ::munmap(c.memory, c.mapped);
    }
}

uint8_t * LanePacks::allocate(size_t bytes, const ggml_tensor * w) {
    constexpr size_t kHugePage = size_t(2) << 20, kChunk = size_t(64) << 20;
    bytes = (bytes + 63) / 64 * 64;
    if (chunks_.empty() || chunks_.back().used + bytes > chunks_.back().size) {
        const size_t size = std::max(kChunk, (bytes + kHugePage - 1) / kHugePage * kHugePage);
        const size_t mapped = size + kHugePage;
        void * memory = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (memory == MAP_FAILED) {
            throw AllocationError("cannot allocate " + std::to_string(size >> 20) + " MiB to repack '" +
                                  ggml_get_name(w) + "' for row_kernels='vnni-block': " + std::strerror(errno));
        }
        auto * data = (uint8_t *) (((uintptr_t) memory + kHugePage - 1) & ~(uintptr_t) (kHugePage - 1));
#ifdef MADV_HUGEPAGE
        ::madvise(data, size, MADV_HUGEPAGE);  // advice: without it the packs still work, on small pages
#endif
        ggml_backend_buffer_t buffer = ggml_backend_cpu_buffer_from_ptr(data, size);
        ggml_backend_buffer_set_usage(buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        chunks_.push_back({memory, mapped, data, size, 0, buffer});
    }
    Chunk & chunk = chunks_.back();
    uint8_t * at = chunk.data + chunk.used;
    chunk.used += bytes;
    return at;
}

ggml_tensor * LanePacks::get(const ggml_tensor * w) {
    if (!lane_packs_handle(w->type) || w->ne[1] < kLaneRows || w->ne[2] != 1 || w->ne[3] != 1 || !w->buffer ||
        !ggml_backend_buffer_is_host(w->buffer) || w->nb[1] != ggml_row_size(w->type, w->ne[0])) {
        return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Pack & p : packs_) {
        if (p.weight == w) return p.packed;
    }
    const int64_t n_blocks = w->ne[0] / ggml_blck_size(w->type);
    const size_t bytes = lane_pack_bytes(w->type, w->ne[1], n_blocks);
    uint8_t * data = allocate(bytes, w);
    lane_pack(w->type, (const uint8_t *) w->data, w->nb[1], w->ne[1], n_blocks, data);
    ggml_init_params params{ggml_tensor_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * packed = ggml_new_tensor_1d(ctx, GGML_TYPE_I8, (int64_t) bytes);
    ggml_set_name(packed, (std::string(ggml_get_name(w)) + ".lanes").c_str());
    ggml_backend_tensor_alloc(chunks_.back().buffer, packed, data);
    if (drop_file_pages_) {  // the whole pages within w
        const long page = ::sysconf(_SC_PAGESIZE);
        const uintptr_t first = ((uintptr_t) w->data + page - 1) / page * page;
        const uintptr_t end = ((uintptr_t) w->data + ggml_nbytes(w)) / page * page;
        if (end > first) ::madvise((void *) first, end - first, MADV_DONTNEED);
    }
    packs_.push_back({w, ctx, packed});
    bytes_ += bytes;
    return packed;
}

}  // namespace ggspec
