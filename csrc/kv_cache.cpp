#include "kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "buffers.h"

namespace ggspec {

SlotMap::SlotMap(int64_t n_slots, bool ring, int64_t window)
    : n_slots_(n_slots), ring_(ring), window_(window), pos_(n_slots, -1) {}

void SlotMap::rewind(int64_t length) {
    if (ring_ && std::max<int64_t>(0, length - window_) < oldest_kept_) {
        throw std::invalid_argument(
            "cannot rewind to " + std::to_string(length) + ": the sliding-window cache keeps only positions from " +
            std::to_string(oldest_kept_) + " on (rewind at most " + std::to_string(n_slots_ - window_) +
            " positions behind the newest, or reset)");
    }
    for (int64_t & p : pos_) {
        if (p >= length) p = -1;
    }
}

void SlotMap::clear() {
    std::fill(pos_.begin(), pos_.end(), -1);
    oldest_kept_ = 0;
}

void SlotMap::write(int64_t pos) {
    const int64_t s = slot(pos);
    if (ring_ && pos_[s] >= 0) oldest_kept_ = std::max(oldest_kept_, pos_[s] + 1);
    pos_[s] = pos;
}

void SlotMap::fill_mask(float * mask, int64_t n_kv, int64_t base, const int32_t * positions, int64_t n_rows,
                        int64_t window, int64_t horizon) const {
    const int64_t end = std::min(n_kv, base + n_slots_);
    for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t p = positions[r];
        const int64_t last = horizon >= 0 ? horizon : p;
        float * row = mask + r * n_kv;
        std::fill(row, row + std::min(base, n_kv), -INFINITY);
        for (int64_t s = base; s < end; ++s) {
            const int64_t q = pos_[s - base];
            const bool visible = q >= 0 && q <= last && (window <= 0 || p - q < window);
            row[s] = visible ? 0.0f : -INFINITY;
        }
        if (end > base) std::fill(row + end, row + n_kv, -INFINITY);
    }
}

KvCache::KvCache(const LayerBufts & bufts, const Hparams & hp, int64_t n_ctx, int64_t max_rows, ggml_type type,
                 int64_t n_seqs)
    : hp_(hp), n_ctx_(n_ctx), n_slots_full_(round_up(n_ctx, kKvBucket)) {
    if (hp.n_swa > 0) {
        n_slots_ring_ = round_up(hp.n_swa + max_rows - 1, kKvBucket);
        has_ring_ = n_slots_ring_ < n_slots_full_;
    }
    seqs_.resize((size_t) n_seqs);
    for (Sequence & s : seqs_) {
        s.full = SlotMap(n_slots_full_, false, 0);
        if (has_ring_) s.ring = SlotMap(n_slots_ring_, true, hp.n_swa);
    }

    k_.assign(hp.n_layer, nullptr);
    v_.assign(hp.n_layer, nullptr);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        // a recurrent layer keeps its own state (recurrent_state.h); a shared-KV layer reads another's cache
        if (hp.recurrent(il) || hp.cache_layer(il) != il) continue;
        const int64_t n_slots = n_seqs * (layer_uses_ring(il) ? n_slots_ring_ : n_slots_full_);
        ggml_context * ctx = tensors_.context_for(bufts[il], 2 * (size_t) hp.n_layer);
        k_[il] = ggml_new_tensor_2d(ctx, type, hp.n_embd_kv_of(il), n_slots);
        v_[il] = ggml_new_tensor_2d(ctx, type, n_slots, hp.n_embd_kv_of(il));
        ggml_format_name(k_[il], "cache_k_l%d", (int) il);
        ggml_format_name(v_[il], "cache_v_l%d", (int) il);
    }
    tensors_.allocate("the KV cache of " + std::to_string(n_seqs) + " x " + std::to_string(n_ctx) +
                      " positions (lower -c/n_ctx or the slots)");
    // Masked slots are multiplied by zero weights: they must hold finite values.
    tensors_.clear(0);
}

int64_t KvCache::n_kv_full(int64_t n_rows, int64_t seq) const {
    return base(false, seq) + std::min(round_up(seqs_[seq].len + n_rows, kKvBucket), n_slots_full_);
}

int64_t KvCache::n_kv_ring(int64_t n_rows, int64_t seq) const {
    if (!has_ring_) return n_kv_full(n_rows, seq);
    return base(true, seq) + std::min(n_slots_ring_, n_kv_full(n_rows, seq) - base(false, seq));
}

void KvCache::advance(int64_t n, int64_t seq) {
    Sequence & s = seqs_[seq];
    for (int64_t pos = s.len; pos < s.len + n; ++pos) {
        s.full.write(pos);
        if (has_ring_) s.ring.write(pos);
    }
    s.len += n;
}

void KvCache::rewind(int64_t length, int64_t seq) {
    Sequence & s = seqs_[seq];
    if (length < 0 || length > s.len) {
        throw std::invalid_argument("rewind length " + std::to_string(length) + " is outside [0, " +
                                    std::to_string(s.len) + "]");
    }
    if (has_ring_) s.ring.rewind(length);  // first: it is the one that may refuse
    s.full.rewind(length);
    s.len = length;
}

void KvCache::clear() {
    for (int64_t seq = 0; seq < n_seqs(); ++seq) clear_seq(seq);
}

void KvCache::clear_seq(int64_t seq) {
    Sequence & s = seqs_[seq];
    s.full.clear();
    if (has_ring_) s.ring.clear();
    s.len = 0;
}

size_t KvCache::bytes() const { return tensors_.bytes(); }

size_t KvCache::position_bytes() const {
    size_t bytes = 0;
    for (ggml_tensor * k : k_) {
        if (k) bytes += 2 * ggml_row_size(k->type, k->ne[0]);
    }
    return bytes;
}

namespace {

// One run of bytes between a cache tensor and the host: a memcpy when the
// cache is in host memory (a block's V is thousands of short runs, and
// tensor_get's checks cost more than the copy), else the backend's copy.
void copy_run(ggml_tensor * t, size_t offset, size_t bytes, uint8_t * host, bool to_host) {
    if (ggml_backend_buffer_is_host(t->buffer)) {
        uint8_t * data = (uint8_t *) t->data + offset;
        std::memcpy(to_host ? host : data, to_host ? data : host, bytes);
    } else if (to_host) {
        ggml_backend_tensor_get(t, host, offset, bytes);
    } else {
        ggml_backend_tensor_set(t, host, offset, bytes);
    }
}

int64_t total_positions(const std::vector<KvCache::HostCopy> & copies) {
    int64_t n = 0;
    for (const KvCache::HostCopy & c : copies) {
        if (c.n < 0) throw std::invalid_argument("a prefix copy of " + std::to_string(c.n) + " positions");
        n += c.n;
    }
    return n;
}

}  // namespace

void KvCache::copy_positions(int64_t seq, int64_t pos, const std::vector<HostCopy> & copies, bool to_host) const {
    std::vector<uint8_t *> at;  // each copy's cursor
    for (const HostCopy & c : copies) at.push_back(c.data);
    // runs of consecutive slots from position p, n long: a ring's positions wrap at most once
    auto each_run = [&](const SlotMap & map, int64_t p, int64_t n, auto && fn) {
        for (int64_t done = 0; done < n;) {
            const int64_t slot = map.slot(p + done);
            const int64_t run = std::min(n - done, map.n_slots() - slot);
            fn(slot, done, run);
            done += run;
        }
    };
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        ggml_tensor * k = k_[il];
        if (!k) continue;
        ggml_tensor * v = v_[il];
        const int64_t n_embd_kv = k->ne[0];
        const bool ring = layer_uses_ring(il);
        const SlotMap & map = slots(ring, seq);
        const int64_t region = base(ring, seq);
        const size_t k_row = ggml_row_size(k->type, n_embd_kv), elem = ggml_type_size(v->type);
        int64_t p = pos;
        for (size_t i = 0; i < copies.size(); ++i) {
            each_run(map, p, copies[i].n, [&](int64_t slot, int64_t done, int64_t run) {
                copy_run(k, (size_t) (region + slot) * k_row, (size_t) run * k_row, at[i] + done * k_row, to_host);
            });
            at[i] += copies[i].n * k_row;
            p += copies[i].n;
        }
        for (int64_t c = 0; c < n_embd_kv; ++c) {
            p = pos;
            for (size_t i = 0; i < copies.size(); ++i) {
                each_run(map, p, copies[i].n, [&](int64_t slot, int64_t done, int64_t run) {
                    copy_run(v, v->nb[1] * (size_t) c + (size_t) (region + slot) * elem, (size_t) run * elem,
                             at[i] + done * elem, to_host);
                });
                at[i] += copies[i].n * elem;
                p += copies[i].n;
            }
        }
    }
}

void KvCache::read_positions(int64_t seq, int64_t pos, const std::vector<HostCopy> & copies) const {
    const Sequence & s = seqs_[seq];
    const int64_t n = total_positions(copies);
    if (pos < 0 || pos + n > s.len) {
        throw std::invalid_argument("positions [" + std::to_string(pos) + ", " + std::to_string(pos + n) +
                                    ") are outside the sequence's " + std::to_string(s.len));
    }
    for (int64_t p = pos; has_ring_ && p < pos + n; ++p) {
        if (!s.ring.holds(p)) {
            throw std::invalid_argument("position " + std::to_string(p) +
                                        " has left the sliding-window cache: copy rows before the ring overwrites them");
        }
    }
    copy_positions(seq, pos, copies, true);
}

void KvCache::append_positions(int64_t seq, const std::vector<HostCopy> & copies) {
    const int64_t pos = seqs_[seq].len, n = total_positions(copies);
    if (pos + n > n_ctx_) {
        throw std::invalid_argument("appending " + std::to_string(n) + " positions at " + std::to_string(pos) +
                                    " overflows the context of " + std::to_string(n_ctx_));
    }
    advance(n, seq);
    copy_positions(seq, pos, copies, false);
}

}  // namespace ggspec
