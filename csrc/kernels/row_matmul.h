// ggml_mul_mat, or ggspec's own CPU kernels where they give the same bits and
// are faster: multi-row kernels for a verify's or a prefill chunk's many rows
// through a quantized matrix (see q8_dot_rows.h and k_dot_rows.h), and ggml's
// vec_dot with the weights fetched ahead for a decode step's one row
// (one_row_dot.h).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace ggspec {

// Which multi-row kernels run: none (ggml_mul_mat everywhere), the AVX2 ones,
// the AVX512-VNNI ones (both with ggml's bits), or the AVX512-VNNI ones with
// the 32-value block types in the block order (kernels/q8_dot_rows.h): faster,
// exact across row counts, but not ggml's bits.
enum class RowKernels { off, avx2, vnni, vnni_block };

// The path weight products take on each RPC worker's memory (by its buffer
// type): a ggspec worker runs the kernels (kernels/portable_op.h), any other
// ggml's own ops (off).
using WorkerKernels = std::vector<std::pair<ggml_backend_buffer_type_t, RowKernels>>;

// "auto" (the best path with ggml's bits this CPU runs, else off), "vnni",
// "vnni-block", "avx2" or "off"; a path this CPU cannot run is an
// std::invalid_argument naming what it lacks.
RowKernels row_kernels_from_name(const std::string & name);
const char * row_kernels_name(RowKernels path);
bool row_kernels_cpu(RowKernels path);  // this CPU runs the path
bool row_kernels_avx512(RowKernels path);  // the path's kernels take AVX512-VNNI's

// Whether the path has a kernel for weights of this type that a probe at first
// use found bit-identical to its reference on this CPU: ggml's vec_dot, or the
// block order's scalar dot.
bool row_kernel_usable(ggml_type weight_type, RowKernels path);

// w [k, n] (weights in host memory), x [k, rows] F32 -> [n, rows] F32, equal bit
// for bit to ggml_mul_mat(ctx, w, x) (on vnni-block, to the block order where it
// applies), whatever the row count. Uses the path's kernel where usable. Also
// for a stack of matrices, as attention multiplies its heads: w [k, n, m_w] (each
// row contiguous) and x [k, rows, m] -> [n, rows, m], matrix i of x meeting
// matrix i / (m / m_w) of w. mask (attention's K·Q: F32 [n, rows], shared by
// the matrices) is what the caller adds to the product next: where it is -inf
// the output may be 0 rather than the product (the kernels skip those).
//
// dealer: where a multi-row product's threads take the last of its weight rows
// as they finish (RunDealer); null: each thread takes a fixed share.
//
// shared: where a graph's products of one x (q, k and v; gate and up) find x
// quantized by one op for all of them, each row by one thread. Without it each
// thread of each product quantizes every row itself.
//
// packs: where the model's weights packed for vnni-block (lane_packs_handle) are
// kept (kernels/lane_packs.h); w is packed there at its first product. Null: the
// products read the stored weights.
class QuantizedActs;
class LanePacks;
class RunDealer;
ggml_tensor * row_mul_mat(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, RowKernels path,
                          ggml_tensor * mask = nullptr, QuantizedActs * shared = nullptr, LanePacks * packs = nullptr,
                          RunDealer * dealer = nullptr);

// The products of several weight matrices with one x (q, k and v; gate and up;
// a delta-net layer's input projections), each equal bit for bit to
// row_mul_mat's. Up to 3 of them that run on a kernel and have the first such
// one's weight type share one op, as views [n_w, rows] of its output, x F32
// [k, rows] quantized once by `shared`; any other is a row_mul_mat of its own.
// (One type keeps a run of weight rows one cost, as RunDealer's shares assume:
// with Gemma 3's Q8_0 v in one op with its Q5_0 q and k, near-placement 8-row
// verifies read 1.022 of the unfused ones, 2 of 8 pairs faster; with v apart,
// 0.994, 6 of 9.)
// One op ends in one barrier where three products ended in three, and its
// threads deal the runs of all its matrices (dealer), so the small k and v
// products no longer end a node each with their threads' uneven finish.
std::vector<ggml_tensor *> row_mul_mats(ggml_context * ctx, const std::vector<ggml_tensor *> & ws, ggml_tensor * x,
                                        RowKernels path, QuantizedActs * shared, LanePacks * packs = nullptr,
                                        RunDealer * dealer = nullptr);

// On an RPC worker: points a product a client tagged (kernels/portable_op.h) at
// this process's kernel. False for any other node, and for a path this host
// does not serve.
bool localize_row_product(ggml_tensor * node);
// The paths whose kernel this host runs bit-identically for every weight type
// the path handles: bit (1 << path). What a worker offers its clients.
int32_t row_kernel_paths_served();

// What a product's op reads from its userdata: its path, and the dealer of its
// last weight rows (null: fixed shares; so on an RPC worker).
struct DotRowsParams {
    RowKernels path;
    RunDealer * dealer;
};

// The weight rows of a multi-row product go a fixed share to each thread, the
// last quarter of each share kept in reserve: its owner takes what is left of
// it once done with the rest, then takes from the back of the others'. On
// this host's shared cores one core can run the same share 17% slower than
// the other for seconds at a time (bench/README.md), and the faster one
// waited at the node's barrier. Which thread computes an output changes none
// of its bits.
//
// One dealer serves the products of the graphs a GraphRunner computes, one at
// a time, every thread of its backend running each. A reserve is its first
// and end run in one word. Each owner empties its own before it leaves a
// product, so a thief that looks before the owner has set the next product's
// finds nothing to take.
class RunDealer {
public:
    RunDealer();
    RunDealer(const RunDealer &) = delete;
    RunDealer & operator=(const RunDealer &) = delete;

    const DotRowsParams * params(RowKernels path) const { return &params_[(size_t) path]; }
    // Thread ith of nth's part of a product's runs [0, total) of weight rows
    // against `rows` activation rows: compute(first, end) for each span of runs
    // it takes.
    void share(int ith, int nth, int64_t total, int64_t rows, const std::function<void(int64_t, int64_t)> & compute);

private:
    // Up to `runs` runs of owner's reserve, from its front or its back: false when it is empty.
    bool take(int owner, int64_t runs, bool front, int64_t & first, int64_t & end);

    struct alignas(64) Reserve {
        std::atomic<uint64_t> span{0};  // first << 32 | end
    };
    std::array<Reserve, GGML_MAX_N_THREADS> reserves_;
    std::array<DotRowsParams, 4> params_;
};

// A graph's activations quantized for the kernels, one op per (x, type).
class QuantizedActs {
public:
    ggml_tensor * get(ggml_context * ctx, ggml_tensor * x, ggml_type act_type);

private:
    std::map<std::pair<const ggml_tensor *, ggml_type>, ggml_tensor *> ops_;
};

}  // namespace ggspec
