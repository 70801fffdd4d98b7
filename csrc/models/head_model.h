// A per-token draft head as the runtime (draft_head.h) runs it, whichever file
// holds it: a NextN (MTP) block stored in the target's own GGUF, or a drafter
// GGUF of its own (EAGLE-3, the Gemma 4 assistant). Each head row reads one token
// and the trunk's row(s) before it, or, for a chained draft, the head's own
// output row.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model_file.h"
#include "models/forward_graph.h"

namespace ggspec {

struct HeadModel {
    Hparams hp;
    ModelWeights w;
    BuildBody build;          // rows that read trunk rows (a catch-up, a first draft step)
    BuildBody build_chained;  // rows that read the head's own output row; null: as build
    // The trunk rows a head row reads, concatenated (Target taps: i the residual entering
    // layer i, -1 the trunk's output after its final norm), and their width.
    std::vector<int> trunk_taps = {-1};
    int64_t trunk_width = 0;
    int chain_tap = -1;  // the output row a chained row reads: -1 after the head's final norm, else layer_inputs[i]
    int64_t chain_width = 0;  // that row's width; 0: hp.n_embd
    // The first token position that has a row: the row of token q sits at head position
    // q - first_token (EAGLE-3 pairs token P+1 with the trunk's row at P, at P).
    int64_t first_token = 0;
    std::vector<int64_t> head_to_token;  // a reduced LM head's rows as target tokens (empty: the identity)
    std::unique_ptr<ModelFile> file;     // the head's own GGUF; null when it is the target's

    // No KV of its own (the Gemma 4 assistant): each layer attends over the trunk's
    // cache of layer hp.kv_layer[il], and every row of a draft sits at the trunk's
    // next position, as llama.cpp's shared-cache draft loop puts them.
    bool reads_trunk_kv = false;

    int64_t chained_width() const { return chain_width ? chain_width : hp.n_embd; }
    int64_t head_rows() const { return w.output->ne[1]; }  // the ids one row can rank
};

// The target file's NextN block n_layer, as its architecture reads and builds it.
HeadModel nextn_head_model(const ModelFile & file, const Architecture & arch, const Hparams & trunk,
                           const ModelWeights & trunk_w);

// A drafter GGUF of its own, as its general.architecture says: EAGLE-3 ("eagle3") or
// the Gemma 4 assistant ("gemma4-assistant"), in llama.cpp's formats; checked against
// the target it is bound to and bound to `dev`.
HeadModel attached_head_model(const std::string & path, const Hparams & trunk, const ModelWeights & trunk_w,
                              ggml_backend_dev_t dev);

HeadModel eagle3_head_model(std::unique_ptr<ModelFile> file, const Hparams & trunk, const ModelWeights & trunk_w,
                            ggml_backend_dev_t dev);
HeadModel gemma4_assistant_head_model(std::unique_ptr<ModelFile> file, const Hparams & trunk,
                                      const ModelWeights & trunk_w, ggml_backend_dev_t dev);

}  // namespace ggspec
