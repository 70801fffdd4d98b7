#pragma once
// What ggspec's custom graph ops (the masked softmax, the row argmax) share
// with the probe that guards each: their result against the ggml op they
// replace, checked once per process.
#include <cstring>
#include <deque>
#include <initializer_list>
#include <mutex>

#include "ggml.h"

namespace ggspec {

// Whether `op`, run on one thread over `sources` with `userdata`, writes the
// bytes of `want`: the ggml op it replaces, built over the same sources in
// ctx (an allocating context), which this computes.
bool op_matches_ggml(ggml_context * ctx, ggml_tensor * want, std::initializer_list<ggml_tensor *> sources,
                     ggml_custom_op_t op, void * userdata);

// A custom op's userdata must outlive every graph that holds it: one copy of
// each distinct value (compared byte for byte, so T has no padding), for the process.
template <class T>
const T * interned(const T & value) {
    static std::deque<T> values;
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    for (const T & v : values) {
        if (std::memcmp(&v, &value, sizeof(T)) == 0) return &v;
    }
    values.push_back(value);
    return &values.back();
}

// The op's probe, on a CPU with the kernels' AVX2 path; a failure is reported
// on stderr as "ggspec: <failure>". Call it once (a function-local static).
bool op_probe_passes(bool (*probe)(), const char * failure);

}  // namespace ggspec
