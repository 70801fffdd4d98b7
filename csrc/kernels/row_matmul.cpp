#include "kernels/row_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <vector>

#include "ggml-cpu.h"
#include "kernels/half_dot_rows.h"
#include "kernels/k_block_order.h"
#include "kernels/k_dot_rows.h"
#include "kernels/mask_span.h"
#include "kernels/one_row_dot.h"
#include "kernels/lane_packs.h"
#include "kernels/portable_op.h"
#include "kernels/span.h"
#include "kernels/q8_dot_rows.h"
#include "kernels/x86_target.h"

namespace ggspec {
namespace {

// A multiple of every kernel's weight tile, and of a packed group (lane_packs.h).
constexpr int64_t kWeightRowAlign = kLaneRows;

// The paths with fixed shares, as the custom op's userdata.
const DotRowsParams kPaths[] = {{RowKernels::off, nullptr},
                                {RowKernels::avx2, nullptr},
                                {RowKernels::vnni, nullptr},
                                {RowKernels::vnni_block, nullptr}};

bool kernel_handles(ggml_type type) {
    return k_dot_rows_handles(type) || q8_dot_rows_handles(type) || half_dot_rows_handles(type);
}

bool path_handles(ggml_type type, RowKernels path) { return path != RowKernels::off && kernel_handles(type); }

// Whether the path's kernel multiplies w by x: F32 activation rows, matrices a
// kernel steps through, and a kernel for w's type found exact on this CPU.
bool kernel_takes(const ggml_tensor * w, const ggml_tensor * x, RowKernels path) {
    return x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[3] == 1 && w->ne[3] == 1 &&
           x->ne[2] % w->ne[2] == 0 && w->nb[0] == ggml_type_size(w->type) && row_kernel_usable(w->type, path);
}

// Whether a path's products of this type take a block order (q8_dot_rows.h,
// k_block_order.h) rather than vec_dot's, at every row count.
bool block_order(ggml_type type, RowKernels path) {
    return path == RowKernels::vnni_block && (q8_dot_rows_handles(type) || k_block_order_handles(type));
}

// The kernel for a weight type: halves, 32-value blocks or the K-quants' 256;
// for one activation row in vec_dot's order, vec_dot itself. packed: the
// weights' copy 16 rows to a register (lane_packs.h), or null.
void dot_rows(const DotRowsJob & job, int64_t w_begin, int64_t w_end, RowKernels path, const uint8_t * packed) {
#if GGSPEC_X86_KERNEL
    if (block_order(job.weight_type, path)) {
        if (packed) w_begin = lane_dot_rows_vnni(job, packed, w_begin, w_end);
        if (w_begin < w_end) {
            (k_block_order_handles(job.weight_type) ? k_block_order_vnni : q8_block_order_vnni)(job, w_begin, w_end);
        }
    } else if (job.n_acts == 1) {
        one_row_dot(job, w_begin, w_end);
    } else if (half_dot_rows_handles(job.weight_type)) {
        half_dot_rows(job, w_begin, w_end, row_kernels_avx512(path));
    } else if (k_dot_rows_handles(job.weight_type)) {
        k_dot_rows(job, w_begin, w_end, row_kernels_avx512(path));
    } else {
        (path == RowKernels::vnni ? q8_dot_rows_vnni : q8_dot_rows_avx2)(job, w_begin, w_end);
    }
#else  // no kernel is built, and row_kernels_cpu() offers no path but off
    throw std::logic_error("the multi-row kernels are not built for this CPU");
#endif
}

// What ggml quantizes the activations to for this weight type (its vec_dot_type).
ggml_type activation_type(ggml_type weight_type) {
    if (half_dot_rows_handles(weight_type)) return weight_type;
    if (k_dot_rows_handles(weight_type)) return GGML_TYPE_Q8_K;
    return q8_has_min(weight_type) ? GGML_TYPE_Q8_1 : GGML_TYPE_Q8_0;
}

// Thread ith of nth's runs of a product's `total` runs of weight rows against
// `rows` activation rows: compute(first, end) for each span it takes. A decode
// step's one row waits on memory, and its threads were seen to finish
// together: it keeps fixed shares, as does a product without a dealer.
void share_runs(const DotRowsParams & params, int ith, int nth, int64_t total, int64_t rows,
                const std::function<void(int64_t, int64_t)> & compute) {
    if (!params.dealer || nth < 2 || rows < 2 || total > INT32_MAX) {
        const Span share = fixed_share(ith, nth, total);
        return compute(share.lo, share.hi);
    }
    params.dealer->share(ith, nth, total, rows, compute);
}

// dst [n_w, n_a, n_mat] = w [k, n_w, n_w_mat] x a [k, n_a, n_mat], matrix i of a
// meeting matrix i / (n_mat / n_w_mat) of w (ggml_mul_mat's broadcast: attention
// heads sharing a KV head). Threads split the weight rows of all matrices
// together, in runs of kWeightRowAlign within a matrix.
void dot_rows_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const DotRowsParams & params = *(const DotRowsParams *) userdata;
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * quantized = dst->src[2];  // src[1] in its act_type (QuantizedActs), or absent
    const ggml_tensor * a = quantized ? quantized : dst->src[1];
    const ggml_tensor * mask = dst->src[3];  // shared by every matrix, or absent
    const ggml_tensor * packed = dst->src[4];  // w packed in lanes (one matrix), or absent
    const int64_t n_w = w->ne[1], n_mat = a->ne[2], per_w_mat = n_mat / w->ne[2];
    const int64_t runs = (n_w + kWeightRowAlign - 1) / kWeightRowAlign;  // per matrix
    const auto compute = [&](int64_t first, int64_t last) {  // runs [first, last) of all matrices
        for (int64_t run = first; run < last;) {
            const int64_t m = run / runs, end = std::min(last, (m + 1) * runs);  // this matrix's share
            const DotRowsJob job{w->type,
                                 (const uint8_t *) w->data + (m / per_w_mat) * w->nb[2],
                                 w->nb[1],
                                 (const uint8_t *) a->data + m * a->nb[2],
                                 a->nb[1],
                                 activation_type(w->type),
                                 w->ne[0] / ggml_blck_size(w->type),
                                 a->ne[1],
                                 (float *) ((uint8_t *) dst->data + m * dst->nb[2]),
                                 dst->ne[0],
                                 mask ? (const float *) mask->data : nullptr,
                                 mask ? (int64_t) (mask->nb[1] / sizeof(float)) : 0,
                                 quantized != nullptr};
            dot_rows(job, (run - m * runs) * kWeightRowAlign, std::min(n_w, (end - m * runs) * kWeightRowAlign),
                     params.path, packed ? (const uint8_t *) packed->data : nullptr);
            run = end;
        }
    };
    share_runs(params, ith, nth, runs * n_mat, a->ne[1], compute);
}

// row_mul_mats' op: src[0] x, src[1] x quantized, then each weight matrix and
// its lane packs (or null) in turn; dst holds each matrix's [n_w, n_a] output
// after the one before. Threads split the runs of all the matrices together.
constexpr int kMaxStacked = (GGML_MAX_SRC - 1 - 2) / 2;  // ggml takes fewer than GGML_MAX_SRC arguments

void dot_rows_stack_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const DotRowsParams & params = *(const DotRowsParams *) userdata;
    const ggml_tensor * a = dst->src[1];
    int64_t run_ends[kMaxStacked] = {}, outputs[kMaxStacked] = {};  // cumulative runs; each output's first float
    int n = 0;
    for (int64_t runs = 0, floats = 0; n < kMaxStacked && dst->src[2 + 2 * n]; ++n) {
        const int64_t n_w = dst->src[2 + 2 * n]->ne[1];
        outputs[n] = floats;
        run_ends[n] = runs += (n_w + kWeightRowAlign - 1) / kWeightRowAlign;
        floats += n_w * a->ne[1];
    }
    const auto compute = [&](int64_t first, int64_t last) {
        for (int64_t run = first; run < last;) {
            int m = 0;
            while (run >= run_ends[m]) ++m;
            const int64_t begin = m ? run_ends[m - 1] : 0, end = std::min(last, run_ends[m]);
            const ggml_tensor * w = dst->src[2 + 2 * m];
            const ggml_tensor * packed = dst->src[3 + 2 * m];
            const DotRowsJob job{w->type, w->data, w->nb[1], (const uint8_t *) a->data, a->nb[1],
                                 activation_type(w->type), w->ne[0] / ggml_blck_size(w->type), a->ne[1],
                                 (float *) dst->data + outputs[m], w->ne[1], nullptr, 0, true};
            dot_rows(job, (run - begin) * kWeightRowAlign, std::min(w->ne[1], (end - begin) * kWeightRowAlign),
                     params.path, packed ? (const uint8_t *) packed->data : nullptr);
            run = end;
        }
    };
    share_runs(params, ith, nth, run_ends[n - 1], a->ne[1], compute);
}

// x's rows in the activation type (the userdata's value), as quantize_acts
// gives them, each row by the thread that wrote it where x's op lets that be
// known: ggml's rms_norm (and the mul fused after it) deals rows out one at a
// time, its element-wise ops (and geglu) give each thread a contiguous share.
// The other core's rows cost a cache transfer each: against dealing every x's
// rows one at a time, 8-row verifies ran 1.6% faster on SmolLM2 and 0.8% on
// Gemma 3 (one process alternating, 150 samples, 118 and 103 faster).
void quantize_rows_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor * x = dst->src[0];
    const ggml_from_float_t from_float = kernel_from_float((ggml_type) (intptr_t) userdata);
    const bool dealt = x->op == GGML_OP_RMS_NORM || (x->op == GGML_OP_MUL && x->src[0]->op == GGML_OP_RMS_NORM);
    const int64_t n = x->ne[1];
    const Span share = fixed_share(ith, nth, n);
    const int64_t first = dealt ? ith : share.lo, end = dealt ? n : share.hi;
    for (int64_t r = first; r < end; r += dealt ? nth : 1) {
        from_float((const float *) ((const char *) x->data + r * x->nb[1]), (char *) dst->data + r * dst->nb[1],
                   x->ne[0]);
    }
}

// The kernels' own activation quantization (Q8_K's, vectorized) against ggml's
// from_float, bytes for bytes. A multiply rounded apart from its add differs from
// an FMA only where the product lands next to a half: half the rows are values
// that put iscale * x there (and their largest one sets iscale), half are random.
bool same_quantization(ggml_type weight_type, ggml_type act_type) {
    const int64_t k = 1024, rows = 64;
    std::mt19937 rng(20261201);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> level(-126, 125);
    std::vector<float> values((size_t) (k * rows));
    for (int64_t r = 0; r < rows; ++r) {
        float * row = values.data() + r * k;
        const float top = std::ldexp(1.0f + std::fabs(normal(rng)), (int) (r % 9) - 4);
        for (int64_t i = 0; i < k; ++i) {
            row[i] = r % 2 ? normal(rng) * top / 3 : (float) ((level(rng) + 0.5) * top / 127);
            row[i] = std::fmax(-top, std::fmin(top, row[i]));
        }
        row[r % k] = -top;  // iscale = 127 / top
    }
    const DotRowsJob job{weight_type, nullptr, 0, (const uint8_t *) values.data(), k * sizeof(float), act_type,
                         k / ggml_blck_size(weight_type), rows, nullptr, 0};
    const ActRows ours = quantize_acts(job, 0, rows);
    std::vector<uint8_t> theirs(ours.row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r) {
        ggml_get_type_traits_cpu(act_type)->from_float(values.data() + r * k, theirs.data() + r * ours.row_bytes, k);
    }
    return std::memcmp(ours.data, theirs.data(), theirs.size()) == 0;
}

// Random weights and activations of k values through the kernel and through
// ggml's vec_dot (or the block order's scalar dot), at 1..12 activation rows
// (every tile shape after whole groups of 8) and at 16, 22 and 33 (up to the
// 4 wide groups a tile reads in place: see q8_block_order_vnni.cpp).
bool same_products(ggml_type type, RowKernels path, int64_t k) {
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(type);
    const ggml_type act_type = activation_type(type);
    const ggml_type_traits_cpu * act_traits = ggml_get_type_traits_cpu(act_type);
    const int64_t n_w = 27, n_a = 33;  // 27 weight rows leave a partial tile on every kernel
    const size_t row = ggml_row_size(type, k), act_row = ggml_row_size(act_type, k);
    std::mt19937 rng(20261129);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values((size_t) (k * n_w)), act_values((size_t) (k * n_a));
    std::vector<uint8_t> weights(row * n_w), acts(act_row * n_a);
    for (float & v : values) v = normal(rng) * 0.05f;
    const std::vector<float> importance((size_t) k, 1.0f);  // the IQ2 quantizers need one
    ggml_quantize_chunk(type, values.data(), weights.data(), 0, n_w, k,
                        ggml_quantize_requires_imatrix(type) ? importance.data() : nullptr);
    for (float & v : act_values) v = normal(rng) * 3.0f;
    // zeros at both ends of row 2 and all of row 6, as attention's masked probabilities
    std::fill(act_values.begin() + 2 * k, act_values.begin() + 2 * k + 64, 0.0f);
    std::fill(act_values.begin() + 3 * k - 160, act_values.begin() + 3 * k, 0.0f);
    std::fill(act_values.begin() + 6 * k, act_values.begin() + 7 * k, 0.0f);
    for (int64_t a = 0; a < n_a; ++a) act_traits->from_float(act_values.data() + a * k, acts.data() + a * act_row, k);

    // The stored weights, and on vnni-block the types it packs also packed in
    // lanes (a group of 16 rows, then 11 from the stored ones).
    std::vector<uint8_t> packed;
    std::vector<const uint8_t *> layouts{nullptr};
    if (block_order(type, path) && lane_packs_handle(type)) {
        packed.resize(lane_pack_bytes(type, n_w, k / ggml_blck_size(type)));
        lane_pack(type, weights.data(), row, n_w, k / ggml_blck_size(type), packed.data());
        layouts.push_back(packed.data());
    }
    for (const uint8_t * lanes : layouts) {
        for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 22, 33}) {
            std::vector<float> got((size_t) (rows * n_w));
            dot_rows(DotRowsJob{type, weights.data(), row, (const uint8_t *) act_values.data(),
                                (size_t) k * sizeof(float), act_type, k / ggml_blck_size(type), rows, got.data(), n_w},
                     0, n_w, path, lanes);
            for (int64_t a = 0; a < rows; ++a) {
                for (int64_t w = 0; w < n_w; ++w) {
                    float want;
                    if (block_order(type, path)) {
                        want = (k_block_order_handles(type) ? k_block_order_dot : q8_block_order_dot)(
                            type, weights.data() + w * row, acts.data() + a * act_row, k / ggml_blck_size(type));
                    } else {
                        traits->vec_dot((int) k, &want, 0, weights.data() + w * row, 0, acts.data() + a * act_row, 0,
                                        1);
                    }
                    if (std::memcmp(&want, &got[a * n_w + w], sizeof(float)) != 0) return false;
                }
            }
        }
    }
    return true;
}

// same_products at each k a kernel's loop takes apart: 3 blocks of 256, 25 of
// 32 (IQ4_NL's last one unpaired), or halves with a scalar tail of 19, without
// (the F16 tile's own end) and short enough for the F16 wide tile; any
// differing bit disables the kernel for the type.
bool probe(ggml_type type, RowKernels path) {
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(type);
    const ggml_type act_type = activation_type(type);
    const ggml_type_traits_cpu * act_traits = ggml_get_type_traits_cpu(act_type);
    if (!traits->vec_dot || !act_traits->from_float || traits->vec_dot_type != act_type) return false;
    if (kernel_from_float(act_type) != act_traits->from_float && !same_quantization(type, act_type)) return false;
    const int64_t block = ggml_blck_size(type);
    if (block == 1) {
        return same_products(type, path, 787) && same_products(type, path, 768) && same_products(type, path, 160);
    }
    return same_products(type, path, block == 32 ? 800 : 768);
}

}  // namespace

RowKernels row_kernels_from_name(const std::string & name) {
    if (name == "off") return RowKernels::off;
    if (name == "auto") {
        for (RowKernels path : {RowKernels::vnni, RowKernels::avx2}) {
            if (row_kernels_cpu(path)) return path;
        }
        return RowKernels::off;
    }
    for (RowKernels path : {RowKernels::vnni, RowKernels::vnni_block, RowKernels::avx2}) {
        if (name != row_kernels_name(path)) continue;
        if (!row_kernels_cpu(path)) {
            throw std::invalid_argument("row_kernels '" + name + "': this CPU lacks " +
                                        (row_kernels_avx512(path) ? "AVX512-VNNI" : "AVX2 and FMA"));
        }
        return path;
    }
    throw std::invalid_argument("row_kernels must be auto, vnni, vnni-block, avx2 or off, got '" + name + "'");
}

const char * row_kernels_name(RowKernels path) {
    switch (path) {
        case RowKernels::vnni: return "vnni";
        case RowKernels::vnni_block: return "vnni-block";
        case RowKernels::avx2: return "avx2";
        default: return "off";
    }
}

bool row_kernels_avx512(RowKernels path) { return path == RowKernels::vnni || path == RowKernels::vnni_block; }

bool row_kernels_cpu(RowKernels path) {
#if GGSPEC_X86_KERNEL
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (path == RowKernels::avx2) return avx2;
    if (row_kernels_avx512(path)) {
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }
#endif
    return path == RowKernels::off;
}

bool row_kernel_usable(ggml_type weight_type, RowKernels path) {
    if (!path_handles(weight_type, path) || !row_kernels_cpu(path)) return false;
    static std::map<std::pair<ggml_type, RowKernels>, bool> usable;  // probed once per (type, path)
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = usable.find({weight_type, path});
    if (it == usable.end()) {
        const bool same = probe(weight_type, path);
        if (!same) {
            std::fprintf(stderr, "ggspec: the multi-row %s kernel (%s) differs from its reference; using ggml_mul_mat\n",
                         ggml_type_name(weight_type), row_kernels_name(path));
        }
        it = usable.emplace(std::make_pair(weight_type, path), same).first;
    }
    return it->second;
}

ggml_tensor * row_mul_mat(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, RowKernels path, ggml_tensor * mask,
                          QuantizedActs * shared, LanePacks * packs, RunDealer * dealer) {
    if (!kernel_takes(w, x, path)) return ggml_mul_mat(ctx, w, x);
    const bool masked = attention_mask_fits(mask, w->ne[1], x->ne[1]);
    ggml_tensor * quantized = shared && x->ne[2] == 1 ? shared->get(ctx, x, activation_type(w->type)) : nullptr;
    // the kernels quantize x's rows as ggml_mul_mat does, or read them quantized
    ggml_tensor * packed = packs && block_order(w->type, path) && !masked ? packs->get(w) : nullptr;
    ggml_tensor * args[5] = {w, x, quantized, masked ? mask : nullptr, packed};
    ggml_tensor * product = ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], x->ne[2], 1, args, 5, dot_rows_op,
                                           GGML_N_TASKS_MAX,
                                           (void *) (dealer ? dealer->params(path) : &kPaths[(int) path]));
    set_tag(product, {kTagMagic, TagKind::kernel, KernelOpId::dot_rows, (int32_t) path});
    return product;
}

std::vector<ggml_tensor *> row_mul_mats(ggml_context * ctx, const std::vector<ggml_tensor *> & ws, ggml_tensor * x,
                                        RowKernels path, QuantizedActs * shared, LanePacks * packs,
                                        RunDealer * dealer) {
    // the weights that go in one op: single matrices on a kernel, of the first such one's type
    std::vector<size_t> stacked;
    for (size_t i = 0; i < ws.size() && shared && x->ne[2] == 1 && stacked.size() < (size_t) kMaxStacked; ++i) {
        const ggml_tensor * w = ws[i];
        if (w->ne[0] == x->ne[0] && w->ne[2] == 1 && kernel_takes(w, x, path) &&
            (stacked.empty() || w->type == ws[stacked[0]]->type)) {
            stacked.push_back(i);
        }
    }
    std::vector<ggml_tensor *> products(ws.size(), nullptr);
    if (stacked.size() > 1) {
        const ggml_type act_type = activation_type(ws[stacked[0]]->type);
        ggml_tensor * args[GGML_MAX_SRC] = {x, shared->get(ctx, x, act_type)};
        int64_t floats = 0;
        for (size_t s = 0; s < stacked.size(); ++s) {
            ggml_tensor * w = ws[stacked[s]];
            args[2 + 2 * s] = w;
            args[3 + 2 * s] = packs && block_order(w->type, path) ? packs->get(w) : nullptr;
            floats += w->ne[1] * x->ne[1];
        }
        ggml_tensor * op = ggml_custom_4d(ctx, GGML_TYPE_F32, floats, 1, 1, 1, args, 2 + 2 * (int) stacked.size(),
                                          dot_rows_stack_op, GGML_N_TASKS_MAX,
                                          (void *) (dealer ? dealer->params(path) : &kPaths[(int) path]));
        size_t offset = 0;
        for (size_t i : stacked) {
            products[i] = ggml_view_2d(ctx, op, ws[i]->ne[1], x->ne[1], ws[i]->ne[1] * sizeof(float), offset);
            offset += (size_t) (ws[i]->ne[1] * x->ne[1]) * sizeof(float);
        }
    }
    for (size_t i = 0; i < ws.size(); ++i) {
        if (!products[i]) products[i] = row_mul_mat(ctx, ws[i], x, path, nullptr, shared, packs, dealer);
    }
    return products;
}

bool localize_row_product(ggml_tensor * node) {
    const OpTag tag = tag_of(node);
    if (node->op != GGML_OP_CUSTOM || tag.kind != TagKind::kernel) return false;
    CustomOpParams p;
    std::memcpy(&p, node->op_params, sizeof(p));
    if (tag.id == KernelOpId::dot_rows) {
        const int32_t path = tag.value;
        if (path <= 0 || path > (int32_t) RowKernels::vnni_block || !(row_kernel_paths_served() & (1 << path))) {
            return false;
        }
        p.fun = dot_rows_op;
        p.userdata = (void *) &kPaths[path];
    } else if (tag.id == KernelOpId::quantize_rows) {
        bool quantized_for_a_kernel = false;  // what some kernel's weights multiply (activation_type)
        for (int t = 0; t < GGML_TYPE_COUNT && !quantized_for_a_kernel; ++t) {
            quantized_for_a_kernel = kernel_handles((ggml_type) t) && activation_type((ggml_type) t) == tag.value;
        }
        if (!quantized_for_a_kernel) return false;
        p.fun = quantize_rows_op;
        p.userdata = (void *) (intptr_t) tag.value;
    } else {
        return false;
    }
    std::memcpy(node->op_params, &p, sizeof(p));
    return true;
}

int32_t row_kernel_paths_served() {
    static const int32_t paths = [] {
        int32_t served = 0;
        for (RowKernels path : {RowKernels::avx2, RowKernels::vnni, RowKernels::vnni_block}) {
            bool every = row_kernels_cpu(path);
            for (int t = 0; every && t < GGML_TYPE_COUNT; ++t) {
                every = !path_handles((ggml_type) t, path) || row_kernel_usable((ggml_type) t, path);
            }
            if (every) served |= 1 << (int) path;
        }
        return served;
    }();
    return paths;
}

RunDealer::RunDealer() {
    for (size_t p = 0; p < params_.size(); ++p) params_[p] = {(RowKernels) p, this};
}

// A quarter of each share is in reserve. Its owner takes what is left of it
// whole, as each piece costs its kernel's setup again (its reserve in two
// pieces cost 8- and 16-row verifies 1-3% while the cores ran evenly); a
// thief takes it in two pieces for a verify's rows, whole for a prefill
// chunk's, which sets up a chunk of 64 rows. In one process alternating with
// fixed shares (same bits, Zen 4, 2 threads, vnni-block, 300 cached
// positions; identical one-row steps read 0.95-1.03 in the same runs): while
// the cores ran evenly, SmolLM2's 8-row verifies 0.98-1.03 (median 1.01),
// Gemma 3's 0.99-1.03, 16 rows 0.98-1.03, 256 rows 0.98-1.03; while one core
// was slower, 8-row verifies 0.88-0.94 and 256 rows 0.90-0.94; beside a
// process that kept one core 30% busy, 0.95-0.98. Attention's pairs shared
// the same way cost its verifies 0-4% (fused_attention.cpp keeps fixed shares).
void RunDealer::share(int ith, int nth, int64_t total, int64_t rows,
                      const std::function<void(int64_t, int64_t)> & compute) {
    const auto [lo, hi] = fixed_share(ith, nth, total);
    const int64_t reserved = (hi - lo) / 4, stolen = std::max<int64_t>(1, rows < kActChunk ? reserved / 2 : reserved);
    reserves_[(size_t) ith].span.store((uint64_t) (hi - reserved) << 32 | (uint64_t) hi, std::memory_order_release);
    compute(lo, hi - reserved);
    int64_t first, end;
    if (take(ith, reserved, true, first, end)) compute(first, end);  // what the others left of it, whole
    for (int k = 1; k < nth; ++k) {
        while (take((ith + k) % nth, stolen, false, first, end)) compute(first, end);
    }
}

bool RunDealer::take(int owner, int64_t runs, bool front, int64_t & first, int64_t & end) {
    std::atomic<uint64_t> & span = reserves_[(size_t) owner].span;
    uint64_t old = span.load(std::memory_order_acquire);
    for (;;) {
        const int64_t lo = (int64_t) (old >> 32), hi = (int64_t) (old & 0xffffffffu);
        if (lo >= hi) return false;
        first = front ? lo : std::max(lo, hi - runs);
        end = front ? std::min(hi, lo + runs) : hi;
        const uint64_t rest = front ? (uint64_t) end << 32 | (uint64_t) hi : (uint64_t) lo << 32 | (uint64_t) first;
        if (span.compare_exchange_weak(old, rest, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    }
}

ggml_tensor * QuantizedActs::get(ggml_context * ctx, ggml_tensor * x, ggml_type act_type) {
    ggml_tensor *& op = ops_[{x, act_type}];
    if (!op) {
        ggml_tensor * args[1] = {x};
        op = ggml_custom_4d(ctx, GGML_TYPE_I8, (int64_t) ggml_row_size(act_type, x->ne[0]), x->ne[1], 1, 1, args, 1,
                            quantize_rows_op, GGML_N_TASKS_MAX, (void *) (intptr_t) act_type);
        set_tag(op, {kTagMagic, TagKind::kernel, KernelOpId::quantize_rows, (int32_t) act_type});
    }
    return op;
}

}  // namespace ggspec
