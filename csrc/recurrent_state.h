// The recurrent state of Gated DeltaNet layers, and how a forward's per-row
// snapshots of it become the live state.
//
// Per recurrent layer the state is the causal conv's last Kc-1 inputs
// [Kc-1, channels] and the delta rule's matrix [dk, dk, Hv], both F32 on the
// model's device. Unlike a KV cache it cannot be trimmed: rolling back a
// rejected draft means taking the state after the last kept row, which a
// verify forward keeps for every row (ggml_gated_delta_net's snapshot slots
// and the conv input it read). Each sequence of a many-sequence target has
// its own state.
#pragma once
#include <cstdint>
#include <tuple>
#include <vector>

#include "buffers.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml.h"
#include "hparams.h"

namespace ggspec {

class RecurrentState {
public:
    // bufts: each layer's buffer type (hp.n_layer of them)
    RecurrentState(const LayerBufts & bufts, const Hparams & hp, int64_t n_seqs = 1);
    RecurrentState(const RecurrentState &) = delete;
    RecurrentState & operator=(const RecurrentState &) = delete;

    // [Kc-1, channels]
    ggml_tensor * conv(int64_t il, int64_t seq = 0) const { return conv_[seq * hp_.n_layer + il]; }
    // [dk, dk, Hv], ggml's transposed layout
    ggml_tensor * ssm(int64_t il, int64_t seq = 0) const { return ssm_[seq * hp_.n_layer + il]; }
    const Hparams & hparams() const { return hp_; }

    void clear();               // zeros: the state before the first token, every sequence's
    void clear(int64_t seq);
    size_t bytes() const;
    // The delta-rule state bytes one kept row costs (a verify keeps one per row).
    static size_t row_bytes(const Hparams & hp);
    // One sequence's state copied through the host (the re-forward rollback
    // path, a prefix cache's checkpoints): seq_bytes() each way.
    size_t seq_bytes() const;
    void download(uint8_t * host, int64_t seq) const;
    void upload(const uint8_t * host, int64_t seq);

private:
    const Hparams & hp_;
    PlacedTensors tensors_;
    std::vector<ggml_tensor *> conv_, ssm_;  // [seq * n_layer + il]; null for attention layers
};

// One sequence's rows in a forward, as its recurrent layers see them (part
// of the graph's shape: the state tensors it reads are that sequence's).
struct RecurrentSegment {
    int64_t seq = 0;
    int64_t n_rows = 0;
    int64_t state_slots = 1;   // the rows whose state the graph keeps (1: the last)
    bool writes_state = true;  // whether it also stores the last row's state as the live state

    bool operator<(const RecurrentSegment & o) const {
        return std::tie(seq, n_rows, state_slots, writes_state) <
               std::tie(o.seq, o.n_rows, o.state_slots, o.writes_state);
    }
};

// What a forward left behind from which the state after any of a sequence's
// rows can be taken: the delta net's result (outputs, then one snapshot slot
// per row, newest first) and the conv input [Kc-1 + n_rows, channels].
struct StateSources {
    int64_t il;
    int64_t seq;
    ggml_tensor * delta_net;
    ggml_tensor * conv_input;
    int64_t kept_rows;  // the last rows whose state the delta net kept (its K)
};

// Views of the state after row `row` of an n_rows forward.
struct StateViews {
    ggml_tensor * conv;
    ggml_tensor * ssm;
};
StateViews state_after_row(ggml_context * ctx, const Hparams & hp, const StateSources & src, int64_t n_rows, int64_t row);

// A persistent graph of device-to-device copies that makes the state after
// row `row` of sequence seq's n_rows in a finished forward its live state: no
// host round trip.
class StateCommitGraph {
public:
    // backends: the devices that may hold the state (a split target's
    // workers and the local one); each runs the copies of the layers it holds.
    StateCommitGraph(const std::vector<ggml_backend_t> & backends, const RecurrentState & rs,
                     const std::vector<StateSources> & sources, int64_t seq, int64_t n_rows, int64_t row);
    void run();

private:
    struct Part {
        ggml_backend_t backend = nullptr;
        ggml_context_ptr ctx;
        ggml_cgraph * graph = nullptr;
        ggml_gallocr_ptr allocator;
    };
    std::vector<Part> parts_;
};

// The same through the host (tensor_get, then tensor_set): the measured
// alternative. Returns the bytes moved.
size_t commit_state_through_host(RecurrentState & rs, const std::vector<StateSources> & sources, int64_t seq,
                                 int64_t n_rows, int64_t row);

}  // namespace ggspec
