// What every drafter GGUF bound to a target (a DFlash/DSpark drafter, an EAGLE-3
// head) checks and reads the same way.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model_file.h"

namespace ggspec {

// The file's tokenizer (when it carries one) and its own token embedding (n_embedded
// rows; 0: it borrows the target's) are the target's vocabulary of n_vocab; else a
// ModelFormatError naming `what` (e.g. "EAGLE-3 drafter") and the file.
void require_target_vocabulary(const ModelFile & file, int64_t n_embedded, int64_t n_vocab, const std::string & what);

// A d2t table (I64 [head rows]) read from `file`: every entry a token of a vocabulary of n_vocab.
std::vector<int64_t> read_token_map(const ModelFile & file, const ggml_tensor * d2t, int64_t n_vocab,
                                    const std::string & what);

}  // namespace ggspec
