// A GGUF file: its metadata, and its tensors bound to backend memory.
//
// Every size and offset is checked here before ggml sees it, because a ggml
// assert aborts the process and a read past a truncated mmap raises SIGBUS.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"

namespace ggspec {

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

    // A tensor's metadata (data not yet bound). Throws naming the tensor when
    // it is missing or its shape differs from `ne` (trailing 1s may be omitted).
    ggml_tensor * tensor(const std::string & name, std::vector<int64_t> ne) const;
    ggml_tensor * tensor_or_null(const std::string & name, std::vector<int64_t> ne) const;
    ggml_tensor * find_tensor(const std::string & name) const;  // any shape, or null
    std::vector<std::string> tensor_names() const;

    // Binds every tensor to memory of `dev`: the mmap itself for host
    // devices, an uploaded copy otherwise. Call once, after the lookups.
    void bind(ggml_backend_dev_t dev);

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
    ggml_backend_buffer_t buffer_ = nullptr;
};

}  // namespace ggspec
