// The attention KV cache, with positions that can be rewound, for one or
// several sequences.
//
// Each sequence owns a region of every layer's cache, laid out as the one
// sequence alone would have it: position p at region slot p (or p % ring).
// Regions start at multiples of kKvBucket, so a sequence's slot indices keep
// their residues mod 64, hence the SIMD lanes and chunk boundaries that its
// attention sums over (see "Many sequences" in DEVELOPERS.md).
//
// Layers attending to the whole context keep one slot per position. Sliding-
// window layers keep a ring of window + (largest forward - 1) slots, rounded up:
// enough that every row of a multi-row forward still sees its whole window,
// and that a rejected draft can be rewound without losing it.
//
// Bit-exactness: attention reads a view of the first n_kv slots, where n_kv is
// a multiple of kKvBucket. Padding slots are masked to -inf and contribute
// exact zeros, and a multiple of 32 (the F16 dot's step, and 4 of softmax's 8-lane
// sums) keeps ggml's SIMD dot products free of a scalar tail whose summation
// order would depend on the length. Each bucket crossed builds a new graph
// (about 2 ms); 64 keeps that rare while attention reads at most 63 padding slots
// (llama.cpp pads to 32 without flash attention, 256 with it).
#pragma once
#include <cstdint>
#include <vector>

#include "buffers.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "hparams.h"

namespace ggspec {

constexpr int64_t kKvBucket = 64;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Which position each slot of one cache kind holds.
class SlotMap {
public:
    SlotMap() = default;
    // A ring must keep `window` positions behind any position it rewinds to.
    SlotMap(int64_t n_slots, bool ring, int64_t window);

    int64_t n_slots() const { return n_slots_; }
    int64_t slot(int64_t pos) const { return ring_ ? pos % n_slots_ : pos; }
    bool holds(int64_t pos) const { return pos >= 0 && pos_[slot(pos)] == pos; }
    void write(int64_t pos);
    // Forgets positions >= length; throws when the ring no longer holds the
    // window that position `length` needs.
    void rewind(int64_t length);
    void clear();
    // mask[r * n_kv + base + s]: 0 where row r (at positions[r]) may attend slot
    // s, else -inf (every entry outside [base, base + n_slots) too). A window
    // w > 0 hides positions p' with p - p' >= w (llama.cpp's rule). horizon >= 0
    // makes the rows non-causal: each sees every position up to it.
    void fill_mask(float * mask, int64_t n_kv, int64_t base, const int32_t * positions, int64_t n_rows,
                   int64_t window, int64_t horizon = -1) const;

private:
    int64_t n_slots_ = 0;
    bool ring_ = false;
    int64_t window_ = 0;
    int64_t oldest_kept_ = 0;  // positions below this may have been overwritten
    std::vector<int64_t> pos_;
};

class KvCache {
public:
    // n_ctx positions for each of n_seqs sequences; max_rows: the most rows one
    // forward appends to one sequence.
    // bufts: each layer's buffer type (hp.n_layer of them)
    KvCache(const LayerBufts & bufts, const Hparams & hp, int64_t n_ctx, int64_t max_rows, ggml_type type,
            int64_t n_seqs = 1);
    KvCache(const KvCache &) = delete;
    KvCache & operator=(const KvCache &) = delete;

    int64_t n_ctx() const { return n_ctx_; }
    int64_t n_seqs() const { return (int64_t) seqs_.size(); }
    int64_t seq_len(int64_t seq = 0) const { return seqs_[seq].len; }
    bool has_ring() const { return has_ring_; }
    bool layer_uses_ring(int64_t il) const { return has_ring_ && hp_.is_swa[il]; }

    // Layer il's cache (a shared-KV layer's is the layer's it reads: Hparams::cache_layer)
    ggml_tensor * k(int64_t il) const { return k_[hp_.cache_layer(il)]; }
    ggml_tensor * v(int64_t il) const { return v_[hp_.cache_layer(il)]; }  // transposed: [n_slots, n_embd_kv]
    const SlotMap & slots(bool ring, int64_t seq = 0) const { return ring ? seqs_[seq].ring : seqs_[seq].full; }
    int64_t total_slots(bool ring) const { return n_seqs() * (ring ? n_slots_ring_ : n_slots_full_); }
    // Where a sequence's region starts in the cache's slots.
    int64_t base(bool ring, int64_t seq) const { return seq * (ring ? n_slots_ring_ : n_slots_full_); }

    // The cache slots an n_rows forward from seq_len(seq) attends over: its
    // region's start plus what the sequence alone would attend over.
    int64_t n_kv_full(int64_t n_rows, int64_t seq = 0) const;
    int64_t n_kv_ring(int64_t n_rows, int64_t seq = 0) const;

    // Records that positions [seq_len, seq_len + n) are being written.
    void advance(int64_t n, int64_t seq = 0);
    // Moves past n positions that stay empty (masked): a drafter that never
    // saw a reused prefix.
    void skip(int64_t n, int64_t seq = 0) { seqs_[seq].len += n; }
    void rewind(int64_t length, int64_t seq = 0);
    void clear();                // every sequence
    void clear_seq(int64_t seq);
    size_t bytes() const;

    // A prefix cache's copies of a sequence's rows (engine/prefix_cache.py).
    // A copy of n positions takes n * position_bytes(): per attention layer
    // its K rows, then its V components (each n values, V being transposed).
    // Consecutive copies (blocks) move together: each V component row is
    // touched once for all of them, not once per block.
    size_t position_bytes() const;
    struct HostCopy {
        uint8_t * data;
        int64_t n;  // positions
    };
    // Positions [pos, pos + sum n) of seq into the copies, in order; its cache
    // must still hold them (a sliding-window ring keeps only its last slots).
    void read_positions(int64_t seq, int64_t pos, const std::vector<HostCopy> & copies) const;
    // Appends the copies' positions to seq, as if forwarded.
    void append_positions(int64_t seq, const std::vector<HostCopy> & copies);

private:
    struct Sequence {
        SlotMap full, ring;
        int64_t len = 0;
    };
    // Positions from pos of seq to the copies, or from them into their slots.
    void copy_positions(int64_t seq, int64_t pos, const std::vector<HostCopy> & copies, bool to_host) const;

    const Hparams & hp_;
    int64_t n_ctx_;
    int64_t n_slots_full_;
    int64_t n_slots_ring_ = 0;
    bool has_ring_ = false;
    std::vector<Sequence> seqs_;
    PlacedTensors tensors_;
    std::vector<ggml_tensor *> k_, v_;
};

}  // namespace ggspec
