// The Gated DeltaNet block (Qwen3.5's linear attention), as llama.cpp's
// qwen35 graph computes it: a causal depthwise conv over [q; k; v] with its
// state, L2-normalised q and k, the gated delta rule (ggml_gated_delta_net),
// then an RMS-normed, z-gated output projection.
#pragma once
#include "models/forward_graph.h"

namespace ggspec {

// Pre-normed input [n_embd, n_rows] -> the block's output [n_embd, n_rows].
// Reads the live state of layer il; records its StateSources and, when the
// graph writes state, the copies that store the state after the last row.
ggml_tensor * delta_net(ForwardGraph & g, int64_t il, ggml_tensor * x);

}  // namespace ggspec
