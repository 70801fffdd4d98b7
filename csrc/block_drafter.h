// A block drafter (DFlash) attached to a target from its own GGUF: it reads
// the target's residual rows and drafts a whole block in one forward. It keeps
// its own KV cache of injected context and borrows the target's token
// embedding and LM head (bound weights, never copied) unless it ships its own.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "draft_head.h"
#include "forward_runner.h"
#include "kv_cache.h"
#include "model_file.h"
#include "models/dflash.h"

namespace ggspec {

class BlockDrafter {
public:
    // Throws ModelFormatError naming what does not fit the target: the
    // architecture, the width, a target layer out of range, the vocabulary,
    // the mask token.
    BlockDrafter(const std::string & path, ggml_backend_dev_t dev, ggml_backend_t backend, const Hparams & target,
                 const ModelWeights & target_w, const DrafterOptions & opt);

    // Passes A+B over committed rows at positions start..: features
    // [n, taps * n_embd], the target's inputs of the target_layers. Positions
    // from `start` on are forgotten first; any before it that were never
    // injected stay empty.
    void inject(const float * features, int64_t n, int64_t start);
    // Pass C: [anchor, MASK x (n_block - 1)] at positions pos0..; writes the
    // top_k ids and logits of each MASK row ([n_block - 1, top_k], best first).
    // The block's own K/V are dropped afterwards.
    void draft(int32_t anchor, int64_t pos0, int64_t n_block, int top_k, int32_t * ids, float * values);

    const std::string & path() const { return file_->path(); }
    const DFlashParams & params() const { return d_; }
    int64_t seq_len() const { return kv_->seq_len(); }
    uint64_t graph_calls() const { return inject_->computes() + block_->computes(); }
    void reset() { kv_->clear(); }

private:
    void bind_to(const Hparams & target, const ModelWeights & target_w);
    void seek(int64_t position);  // the KV ends at `position`: rewound, or past empty positions

    std::unique_ptr<ModelFile> file_;
    Hparams hp_;
    ModelWeights w_;
    DFlashParams d_;
    DFlashWeights dw_;
    int64_t max_rows_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<GraphRunner> inject_, block_;
    std::vector<int32_t> tokens_;
};

}  // namespace ggspec
