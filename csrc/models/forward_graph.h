// What an architecture's graph builder works with: the ggml context, the
// model, the cache, and the per-forward input tensors that the target fills
// before each replay of a persistent graph.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "hparams.h"
#include "kernels/row_matmul.h"
#include "kv_cache.h"
#include "recurrent_state.h"

namespace ggspec {

// The inputs of one kind of attention (whole-context or sliding-window).
struct AttentionInputs {
    ggml_tensor * mask = nullptr;   // F32 [n_kv, n_rows]: 0 or -inf
    ggml_tensor * k_idx = nullptr;  // I64 [n_rows]: the K cache row each new row goes to
    ggml_tensor * v_idx = nullptr;  // I64 [n_rows * n_embd_kv]: element slots in the transposed V cache (path off)
    ggml_tensor * regions = nullptr;  // I32 [2 * n_rows]: each row's sequence's region [lo, hi)
    int64_t n_kv = 0;               // slots attended over
    int64_t kv_width = 0;           // a cache row's values: the kind's head size * KV heads
    bool ring = false;              // cache rows come from the sliding-window ring
    int64_t window = 0;             // 0 = whole context
};

struct ForwardGraph {
    ggml_context * ctx;
    const Hparams & hp;
    const ModelWeights & w;
    const KvCache & kv;
    int64_t n_rows;
    ggml_tensor * tokens;     // I32 [n_rows]
    ggml_tensor * positions;  // I32 [n_rows * hp.n_pos_per_token], section-major
    ggml_tensor * hidden_in;  // F32 [hidden width, n_rows]: a drafter's input rows; null for a trunk
    AttentionInputs full;
    AttentionInputs swa;      // used by layers with hp.is_swa[il]
    std::vector<ggml_tensor *> layer_inputs;  // the residual entering each layer: the hidden taps
    RowKernels row_kernels = RowKernels::off;  // weight products may run on ggspec's multi-row CPU kernels

    // Recurrent layers (null rs: none), over each sequence's rows in turn. The
    // builder records each layer's and sequence's StateSources, and, for a
    // segment that writes_state, appends the copies that store its last row's
    // state to `writes`.
    const RecurrentState * rs = nullptr;
    std::vector<RecurrentSegment> recurrent;
    std::vector<StateSources> state_sources;
    // Body-specific results read after the forward (a DFlash2 lattice), in order.
    std::vector<ggml_tensor *> outputs;
    int top_k = 0;  // the ids per row a body ranks in its own outputs (a DSpark block)
    // Nodes with effects that no output depends on (state and cache writes):
    // added to the graph after everything the builder returned.
    std::vector<ggml_tensor *> writes;
    // Each layer's K and V write nodes in this graph (attend): what a later shared-KV layer reads.
    std::vector<std::pair<ggml_tensor *, ggml_tensor *>> written_kv;

    const AttentionInputs & attention_inputs(int64_t il) const { return hp.is_swa[il] ? swa : full; }
    // A weight matrix (or attention's cached K and V) times activations,
    // ggml_mul_mat's bits either way (kernels/row_matmul.h); mask: the one the
    // product is masked with next, whose -inf outputs need not be computed.
    ggml_tensor * matmul(ggml_tensor * weight, ggml_tensor * x, ggml_tensor * mask = nullptr) {
        return row_mul_mat(ctx, weight, x, products_for(weight), mask, &quantized_acts, w.lane_packs.get(), dealer);
    }
    // Several weights times one x (q, k and v; gate and up), matmul's bits each:
    // in one op where they are in this host's memory (row_mul_mats), else apart.
    std::vector<ggml_tensor *> matmuls(const std::vector<ggml_tensor *> & weights, ggml_tensor * x) {
        bool local = true;
        for (const ggml_tensor * weight : weights) local = local && !remote(weight);
        if (!local) {
            std::vector<ggml_tensor *> products;
            for (ggml_tensor * weight : weights) products.push_back(matmul(weight, x));
            return products;
        }
        return row_mul_mats(ctx, weights, x, row_kernels, &quantized_acts, w.lane_packs.get(), dealer);
    }
    // The kernel path for ops on `t` (a weight, or a view of a cache): ggspec's
    // kernels are custom ops holding this process's function pointers, so a
    // split target's layers on an RPC worker (their memory not this host's)
    // run ggml's own ops, whose bits the kernels reproduce...
    RowKernels kernels_for(const ggml_tensor * t) const { return remote(t) ? RowKernels::off : row_kernels; }
    // ...but for the weight products, which a ggspec worker runs on its own
    // kernels (kernels/portable_op.h).
    RowKernels products_for(const ggml_tensor * t) const {
        const ggml_backend_buffer_t buffer = remote(t);
        if (!buffer) return row_kernels;
        for (const auto & [buft, path] : worker_kernels) {
            if (buft == ggml_backend_buffer_get_type(buffer)) return path;
        }
        return RowKernels::off;
    }
    // The RPC worker's buffer `t` lives in, else null.
    static ggml_backend_buffer_t remote(const ggml_tensor * t) {
        const ggml_tensor * home = t->view_src ? t->view_src : t;
        return home->buffer && !ggml_backend_buffer_is_host(home->buffer) ? home->buffer : nullptr;
    }
    WorkerKernels worker_kernels;  // a split target's products' path on each worker (GraphRunner's)
    QuantizedActs quantized_acts;  // x quantized once for all the products that read it
    RunDealer * dealer = nullptr;  // the runner's: its threads' shares of multi-row products
};

// A body's graph builder: the rows' hidden states after its final norm.
using BuildBody = std::function<ggml_tensor *(ForwardGraph & g)>;

// An architecture: how its GGUF is read, and how its trunk is built. The
// trunk ends after the final norm; the target adds the LM head and outputs.
// Architectures whose files may carry NextN (MTP) draft heads also say how
// the head is read (one block after the trunk's; what it lacks it borrows
// from the trunk) and built (it ends after its own final norm).
struct Architecture {
    const char * name;
    void (*load)(const class ModelFile & file, Hparams & hp, ModelWeights & w);
    ggml_tensor * (*build_trunk)(ForwardGraph & g);
    void (*load_nextn)(const class ModelFile & file, const Hparams & trunk, const ModelWeights & trunk_w, Hparams & hp,
                       ModelWeights & w) = nullptr;
    ggml_tensor * (*build_nextn)(ForwardGraph & g) = nullptr;
};

const Architecture * find_architecture(const std::string & name);
std::vector<std::string> architecture_names();  // general.architecture values ggspec runs
std::string supported_architectures();          // the same, comma-separated

}  // namespace ggspec
