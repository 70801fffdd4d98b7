// A GGUF file: its metadata, and its tensors bound to backend memory.
//
// Every size and offset is checked here before ggml sees it, because a ggml
// assert aborts the process and a read past a truncated mmap raises SIGBUS.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"

namespace ggspec {

// What a tensor is used as, which decides the types ggspec can compute with it.
enum class TensorRole {
    inferred,  // 1-D: vector; otherwise matrix
    matrix,    // a weight multiplied (or embedded) row by row: a type ggml has a dot product for
    vector,    // a norm, bias or per-channel parameter, combined elementwise: F32
    table,     // an integer lookup table read on the host (d2t): the caller checks its type
};

// Where a host device's weights live: in the file's memory map (pages load as
// they are first read, and processes share them), or copied into private
// memory that Linux backs with transparent huge pages. A forward reads every
// weight once, and through 4 KB pages each page costs the CPU a page walk: on a
// Zen 4 VM one-row steps ran 12-18% faster from huge pages.
enum class HostWeights { mapped, copied };

class ModelFile {
public:
    explicit ModelFile(const std::string & path);
    ~ModelFile();
    ModelFile(const ModelFile &) = delete;
    ModelFile & operator=(const ModelFile &) = delete;

    const std::string & path() const { return path_; }

    bool has_key(const std::string & key) const;
    std::string get_str(const std::string & key) const;
    int64_t get_int(const std::string & key) const;                 // any integer type
    int64_t get_int(const std::string & key, int64_t fallback) const;
    double get_float(const std::string & key, double fallback) const;  // f32/f64 or integer
    std::vector<int64_t> get_int_array(const std::string & key) const;
    bool is_array(const std::string & key) const;
    size_t array_size(const std::string & key) const;  // 0 when absent or not an array

    // A tensor's metadata (data not yet bound), which the caller now uses. Throws
    // naming the tensor when it is missing, its shape differs from `ne` (trailing 1s
    // may be omitted) or its type cannot serve `role`.
    ggml_tensor * tensor(const std::string & name, std::vector<int64_t> ne,
                         TensorRole role = TensorRole::inferred) const;
    ggml_tensor * tensor_or_null(const std::string & name, std::vector<int64_t> ne,
                                 TensorRole role = TensorRole::inferred) const;
    ggml_tensor * find_tensor(const std::string & name) const;  // any shape, or null; not a use
    // A tensor the format carries and llama.cpp loads without ever reading it (any
    // shape, when present): counted as used, so check_all_used lets it pass.
    void ignore_tensor(const std::string & name) const;
    std::vector<std::string> tensor_names() const;
    // After loading: every tensor of the file was used, or the file holds a piece
    // ggspec would silently skip (computing something other than llama.cpp does).
    void check_all_used(const std::string & what) const;

    // Binds every tensor to memory of `dev`: for host devices the mmap itself
    // or (HostWeights::copied) a private copy, an uploaded copy otherwise. Call
    // once, after the lookups. Where a weight goes instead of dev, by its name
    // (a split target's layers on RPC workers); null: dev.
    using RemoteBuft = std::function<ggml_backend_buffer_type_t(const std::string & name)>;
    void bind(ggml_backend_dev_t dev, const RemoteBuft & remote = {}, HostWeights host = HostWeights::mapped);

    size_t weight_bytes() const;
    // Copies a tensor's bytes out of the file (small tables a host needs, such as a d2t map).
    void read_tensor(const ggml_tensor * t, void * dst) const;

private:
    int key_id(const std::string & key) const;
    void validate_tensor_ranges() const;

    std::string path_;
    gguf_context * gguf_ = nullptr;
    ggml_context * meta_ = nullptr;
    void * map_ = nullptr;
    size_t file_size_ = 0;
    void * copy_ = nullptr;  // HostWeights::copied: the file's bytes, copy_bytes_ mapped
    size_t copy_bytes_ = 0;
    ggml_backend_buffer_t buffer_ = nullptr;
    std::vector<ggml_backend_buffer_t> remote_buffers_;  // one per worker holding weights
    mutable std::vector<std::string> used_;  // names handed out by tensor()/tensor_or_null()
};

// The weight types a matrix may be stored in (ggml computes each with a row-invariant dot product).
bool is_supported_weight_type(ggml_type type);

}  // namespace ggspec
