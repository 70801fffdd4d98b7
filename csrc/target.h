// The target adapter: a GGUF model on one ggml device, with a KV cache, run
// as batched forwards whose row i is bit-identical to the one-row step at
// that position. This is what speculative decoding verifies with.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "graph_cache.h"
#include "hparams.h"
#include "kv_cache.h"
#include "model_file.h"
#include "models/forward_graph.h"

struct ggml_threadpool;

namespace ggspec {

struct ThreadpoolDeleter {
    void operator()(ggml_threadpool * p) const;
};

struct TargetOptions {
    int64_t n_ctx = 4096;
    int n_threads = 0;                 // 0 = every hardware thread
    std::string device = "auto";       // "auto", "cpu", or a ggml device name such as "CUDA0"
    std::string kv_type = "f16";
    int64_t prefill_chunk = 512;
    int64_t max_verify_rows = 65;      // sizes the sliding-window ring
    size_t graph_budget_bytes = size_t(1) << 30;
    bool row_kernels = true;           // ggspec's multi-row CPU kernels where they give ggml's bits
};

// Where forward() writes its results; null fields are not requested.
struct ForwardOutputs {
    float * logits = nullptr;   // [n_out, n_vocab], when top_k == 0
    int32_t * ids = nullptr;    // [n_out, top_k], best first, when top_k > 0
    float * values = nullptr;   // [n_out, top_k]
    float * hidden = nullptr;   // [n_tokens, taps.size() * n_embd]
};

struct ForwardRequest {
    const int32_t * tokens = nullptr;
    int64_t n_tokens = 0;
    bool all_rows = false;  // LM head on every row, or only on the last
    int top_k = 0;
    std::vector<int> taps;  // -1 = after the final norm
};

class Target {
public:
    Target(const std::string & path, const TargetOptions & opt);
    Target(const Target &) = delete;
    Target & operator=(const Target &) = delete;

    // Appends the tokens at positions [seq_len, seq_len + n) and writes the
    // requested outputs. Prefill runs in chunks of opt.prefill_chunk rows.
    void forward(const ForwardRequest & req, const ForwardOutputs & out);
    // Throws (naming the problem) for a request forward() would refuse.
    void check_request(const ForwardRequest & req) const;

    void rewind(int64_t length) { kv_->rewind(length); }
    void reset() { kv_->clear(); }
    void ensure_capacity(int64_t n) const;

    const Hparams & hparams() const { return hp_; }
    int64_t seq_len() const { return kv_->seq_len(); }
    int64_t n_ctx() const { return kv_->n_ctx(); }
    uint64_t graph_builds() const { return graphs_.builds(); }
    size_t graphs_cached() const { return graphs_.size(); }
    std::string device_name() const;
    size_t weight_bytes() const { return file_->weight_bytes(); }
    size_t kv_bytes() const { return kv_->bytes(); }
    int n_threads() const { return n_threads_; }
    // Whether multi-row LM-head products run on ggspec's own kernel (kernels/row_matmul.h).
    bool lm_head_row_kernel() const;

private:
    std::unique_ptr<CachedGraph> build_graph(const GraphKey & key) const;
    void fill_inputs(CachedGraph & g, const int32_t * tokens, int64_t n, int64_t pos0);
    void fill_attention_inputs(const AttentionInputs & in, const int32_t * positions, int64_t n);
    // Hidden rows land at row0; LM-head rows at out_row0 (0 when only the last row is asked for).
    void read_outputs(const CachedGraph & g, const GraphKey & key, int64_t row0, int64_t out_row0,
                      const ForwardOutputs & out) const;

    // Declared in the order they must be built; destroyed in reverse: the
    // graphs and the cache before the backend, the weights' file last.
    TargetOptions opt_;
    std::unique_ptr<ModelFile> file_;
    const Architecture * arch_ = nullptr;
    Hparams hp_;
    ModelWeights w_;
    ggml_backend_dev_t dev_ = nullptr;
    std::unique_ptr<ggml_threadpool, ThreadpoolDeleter> threadpool_;
    ggml_backend_ptr backend_;
    int n_threads_ = 1;
    bool row_kernels_ = false;
    std::unique_ptr<KvCache> kv_;
    GraphCache graphs_;

    // host staging, reused across steps
    std::vector<int32_t> positions_;
    std::vector<float> mask_;
    std::vector<int64_t> idx_;
    std::vector<float> scratch_;
};

// ggml's quantization of a [rows, n_per_row] f32 matrix, for tests that write
// K-quant GGUFs. Returns rows * row_size bytes.
std::vector<uint8_t> quantize_rows(const std::string & type_name, const float * data, int64_t rows, int64_t n_per_row);

}  // namespace ggspec
