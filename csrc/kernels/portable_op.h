// ggspec's weight products as a graph carries them to an RPC worker. ggml's
// RPC client sends each node's op_params verbatim, and a custom op's function
// and userdata pointers there mean nothing in another process. So the products
// also record, in op_params words that ggml leaves unused after its
// ggml_custom_op_params, a tag: which op they are and their userdata by value.
// A ggspec worker (rpc/kernel_worker.h) points tagged nodes at its own
// functions before it computes; a plain ggml worker never gets one.
//
// The same words, on a ggml_scale by 1 (which ggml computes as a copy and
// whose parameters use the first two words), ask a worker whether it runs the
// kernels: a ggspec worker overwrites the output with its answer.
#pragma once
#include <cstdint>
#include <cstring>

#include "ggml.h"

namespace ggspec {

constexpr int32_t kTagMagic = 0x50534747;  // "GGSP"
// Bumped whenever an op's id, userdata or semantics change: a client and a
// worker of different versions then run ggml's own ops.
constexpr int32_t kKernelAbi = 1;

enum class TagKind : int32_t { none = 0, capability_query = 1, kernel = 2 };
enum class KernelOpId : int32_t { dot_rows = 1, quantize_rows = 2 };

struct OpTag {
    int32_t magic;
    TagKind kind;
    KernelOpId id;
    int32_t value;  // the op's userdata by value
};

// What a GGML_OP_CUSTOM node's op_params begin with: ggml's own
// ggml_custom_op_params (ggml.c), which its public headers do not declare.
struct CustomOpParams {
    ggml_custom_op_t fun;
    int n_tasks;
    void * userdata;
};

// op_params words 6..9: after CustomOpParams (24 bytes) and ggml_scale's (s, b).
constexpr size_t kTagOffset = 6 * sizeof(int32_t);
static_assert(sizeof(CustomOpParams) <= kTagOffset, "the tag follows ggml's custom op parameters");
static_assert(kTagOffset + sizeof(OpTag) <= GGML_MAX_OP_PARAMS, "the tag fits in op_params");

inline bool is_custom_op(const ggml_tensor * t) {
    return t->op == GGML_OP_CUSTOM || t->op == GGML_OP_MAP_CUSTOM1 || t->op == GGML_OP_MAP_CUSTOM2 ||
           t->op == GGML_OP_MAP_CUSTOM3;
}

inline void set_tag(ggml_tensor * t, const OpTag & tag) {
    std::memcpy((char *) t->op_params + kTagOffset, &tag, sizeof(tag));
}

inline OpTag tag_of(const ggml_tensor * t) {
    OpTag tag;
    std::memcpy(&tag, (const char *) t->op_params + kTagOffset, sizeof(tag));
    return tag.magic == kTagMagic ? tag : OpTag{0, TagKind::none, {}, 0};
}

// A worker's answer to the capability query, as the query's 4 F32 outputs' bits.
struct KernelCapability {
    int32_t magic;
    int32_t abi;
    int32_t paths;  // bit (1 << RowKernels value) for each path it runs
    int32_t reserved;
};

}  // namespace ggspec
