#include "model_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "buffers.h"
#include "errors.h"
#include "ggml-cpu.h"
#include "log.h"

namespace ggspec {

namespace {

std::string shape_str(const int64_t * ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

bool is_int_type(gguf_type t) {
    switch (t) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
        case GGUF_TYPE_BOOL:
            return true;
        default:
            return false;
    }
}

size_t int_size(gguf_type t) {
    switch (t) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
        case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: return 4;
        default: return 8;
    }
}

int64_t read_int(gguf_type t, const void * p) {
    switch (t) {
        case GGUF_TYPE_UINT8:  return *(const uint8_t *) p;
        case GGUF_TYPE_INT8:   return *(const int8_t *) p;
        case GGUF_TYPE_UINT16: return *(const uint16_t *) p;
        case GGUF_TYPE_INT16:  return *(const int16_t *) p;
        case GGUF_TYPE_UINT32: return *(const uint32_t *) p;
        case GGUF_TYPE_INT32:  return *(const int32_t *) p;
        case GGUF_TYPE_UINT64: return (int64_t) *(const uint64_t *) p;
        case GGUF_TYPE_INT64:  return *(const int64_t *) p;
        case GGUF_TYPE_BOOL:   return *(const int8_t *) p != 0;
        default:               return 0;
    }
}

}  // namespace

ModelFile::ModelFile(const std::string & path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
        throw std::invalid_argument("cannot open model file '" + path + "': " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw std::invalid_argument("'" + path + "' is not a regular file");
    }
    file_size_ = (size_t) st.st_size;
    char magic[4] = {0, 0, 0, 0};
    const bool short_read = ::pread(fd, magic, 4, 0) != 4;
    if (short_read || std::memcmp(magic, "GGUF", 4) != 0) {
        ::close(fd);
        throw ModelFormatError("'" + path + "' is not a GGUF file (bad magic)");
    }
    {
        LogCapture log;
        gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &meta_};
        gguf_ = gguf_init_from_file(path.c_str(), params);
        if (!gguf_) {
            ::close(fd);
            const std::string why = log.text();
            throw ModelFormatError("corrupt GGUF file '" + path + "'" + (why.empty() ? "" : ": " + why));
        }
    }
    try {
        validate_tensor_ranges();
    } catch (...) {
        ::close(fd);
        throw;
    }
    map_ = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        throw std::runtime_error("cannot mmap '" + path + "': " + std::strerror(errno));
    }
}

ModelFile::~ModelFile() {
    if (buffer_) ggml_backend_buffer_free(buffer_);
    for (ggml_backend_buffer_t b : remote_buffers_) ggml_backend_buffer_free(b);
    if (map_) ::munmap(map_, file_size_);
    if (copy_) ::munmap(copy_, copy_bytes_);
    if (meta_) ggml_free(meta_);
    if (gguf_) gguf_free(gguf_);
}

void ModelFile::validate_tensor_ranges() const {
    const size_t data_offset = gguf_get_data_offset(gguf_);
    const int64_t n = gguf_get_n_tensors(gguf_);
    for (int64_t i = 0; i < n; ++i) {
        const size_t begin = data_offset + gguf_get_tensor_offset(gguf_, i);
        const size_t size = gguf_get_tensor_size(gguf_, i);
        if (begin > file_size_ || size > file_size_ - begin) {
            throw ModelFormatError("truncated GGUF file '" + path_ + "': tensor '" +
                                   gguf_get_tensor_name(gguf_, i) + "' needs bytes up to " +
                                   std::to_string(begin + size) + " but the file has " +
                                   std::to_string(file_size_));
        }
    }
}

int ModelFile::key_id(const std::string & key) const { return (int) gguf_find_key(gguf_, key.c_str()); }

bool ModelFile::has_key(const std::string & key) const { return key_id(key) >= 0; }

bool ModelFile::is_array(const std::string & key) const {
    const int id = key_id(key);
    return id >= 0 && gguf_get_kv_type(gguf_, id) == GGUF_TYPE_ARRAY;
}

size_t ModelFile::array_size(const std::string & key) const {
    return is_array(key) ? gguf_get_arr_n(gguf_, key_id(key)) : 0;
}

std::string ModelFile::get_str(const std::string & key) const {
    const int id = key_id(key);
    if (id < 0) throw ModelFormatError("GGUF '" + path_ + "' lacks the key '" + key + "'");
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_STRING) {
        throw ModelFormatError("GGUF key '" + key + "' is not a string");
    }
    return gguf_get_val_str(gguf_, id);
}

int64_t ModelFile::get_int(const std::string & key) const {
    const int id = key_id(key);
    if (id < 0) throw ModelFormatError("GGUF '" + path_ + "' lacks the key '" + key + "'");
    const gguf_type t = gguf_get_kv_type(gguf_, id);
    if (!is_int_type(t)) throw ModelFormatError("GGUF key '" + key + "' is not an integer");
    return read_int(t, gguf_get_val_data(gguf_, id));
}

int64_t ModelFile::get_int(const std::string & key, int64_t fallback) const {
    return has_key(key) ? get_int(key) : fallback;
}

double ModelFile::get_float(const std::string & key, double fallback) const {
    const int id = key_id(key);
    if (id < 0) return fallback;
    const gguf_type t = gguf_get_kv_type(gguf_, id);
    if (t == GGUF_TYPE_FLOAT32) return gguf_get_val_f32(gguf_, id);
    if (t == GGUF_TYPE_FLOAT64) return gguf_get_val_f64(gguf_, id);
    if (is_int_type(t)) return (double) read_int(t, gguf_get_val_data(gguf_, id));
    throw ModelFormatError("GGUF key '" + key + "' is not a number");
}

std::vector<int64_t> ModelFile::get_int_array(const std::string & key) const {
    const int id = key_id(key);
    if (id < 0) throw ModelFormatError("GGUF '" + path_ + "' lacks the key '" + key + "'");
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_ARRAY) return {get_int(key)};
    const gguf_type t = gguf_get_arr_type(gguf_, id);
    if (!is_int_type(t)) throw ModelFormatError("GGUF key '" + key + "' is not an integer array");
    const size_t n = gguf_get_arr_n(gguf_, id);
    const auto * data = (const uint8_t *) gguf_get_arr_data(gguf_, id);
    const size_t stride = int_size(t);
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = read_int(t, data + i * stride);
    return out;
}

ggml_tensor * ModelFile::find_tensor(const std::string & name) const { return ggml_get_tensor(meta_, name.c_str()); }

void ModelFile::ignore_tensor(const std::string & name) const {
    if (find_tensor(name)) used_.push_back(name);
}

std::vector<std::string> ModelFile::tensor_names() const {
    std::vector<std::string> names;
    for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) names.push_back(t->name);
    return names;
}

bool is_supported_weight_type(ggml_type type) {
    switch (type) {
        case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16:
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
        case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S:
        case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS:
            return ggml_get_type_traits_cpu(type)->vec_dot != nullptr;
        default:
            return false;
    }
}

namespace {

void check_role(const ggml_tensor * t, TensorRole role, const std::string & path) {
    if (role == TensorRole::inferred) role = ggml_n_dims(t) == 1 ? TensorRole::vector : TensorRole::matrix;
    std::string type = ggml_type_name(t->type);
    for (char & c : type) c = (char) std::toupper((unsigned char) c);  // as GGUF tools write it: F16, Q4_K
    if (role == TensorRole::vector && t->type != GGML_TYPE_F32) {
        throw ModelFormatError("tensor '" + std::string(t->name) + "' in '" + path + "' is " + type +
                               "; a norm, bias or per-channel parameter must be F32");
    }
    if (role == TensorRole::matrix && !is_supported_weight_type(t->type)) {
        throw ModelFormatError("tensor '" + std::string(t->name) + "' in '" + path + "' is stored as " + type +
                               ", a weight type ggspec does not run (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, "
                               "Q8_0, Q2_K-Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS)");
    }
}

// Pieces llama.cpp computes with and ggspec does not yet: named, so a refusal says what it is.
const char * known_unsupported(const std::string & name) {
    if (name == "rope_freqs.weight") return "RoPE frequency factors, which llama.cpp reads for llama files";
    if (name == "rope_factors_long.weight" || name == "rope_factors_short.weight") return "LongRoPE factors, read with rope.scaling.type longrope";
    if (name.find(".attn_sinks") != std::string::npos) return "attention sinks";
    if (name.find(".bias") != std::string::npos) return "a bias";
    return nullptr;
}

}  // namespace

void ModelFile::check_all_used(const std::string & what) const {
    for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) {
        const std::string name = t->name;
        if (std::find(used_.begin(), used_.end(), name) != used_.end()) continue;
        const char * piece = known_unsupported(name);
        throw ModelFormatError("'" + path_ + "' holds the tensor '" + name + "'" +
                               (piece ? std::string(" (") + piece + ")" : std::string()) + ", which " + what +
                               " does not use: ggspec would compute something other than the file describes");
    }
}

ggml_tensor * ModelFile::tensor_or_null(const std::string & name, std::vector<int64_t> ne, TensorRole role) const {
    ggml_tensor * t = ggml_get_tensor(meta_, name.c_str());
    if (!t) return nullptr;
    bool ok = ne.size() <= GGML_MAX_DIMS;
    for (int i = 0; ok && i < GGML_MAX_DIMS; ++i) {
        const int64_t want = i < (int) ne.size() ? ne[i] : 1;
        ok = t->ne[i] == want;
    }
    if (!ok) {
        throw ModelFormatError("tensor '" + name + "' in '" + path_ + "' has shape " +
                               shape_str(t->ne, ggml_n_dims(t)) + ", expected " +
                               shape_str(ne.data(), (int) ne.size()));
    }
    check_role(t, role, path_);
    if (std::find(used_.begin(), used_.end(), name) == used_.end()) used_.push_back(name);
    return t;
}

ggml_tensor * ModelFile::tensor(const std::string & name, std::vector<int64_t> ne, TensorRole role) const {
    ggml_tensor * t = tensor_or_null(name, ne, role);
    if (!t) throw ModelFormatError("GGUF '" + path_ + "' lacks the tensor '" + name + "'");
    return t;
}

namespace {

// Private memory for a copy of the file, from a huge page's boundary so that
// the kernel can back it with huge pages (MADV_HUGEPAGE: transparent huge pages
// set to "always" or "madvise"). Pages are committed as they are written: a
// split target copies only its local tensors. Returns the mapping; `data` is
// where the file's copy starts.
void * reserve_private_memory(size_t size, const std::string & path, size_t & mapped, uint8_t *& data) {
    constexpr size_t kHugePage = size_t(2) << 20;
    const size_t bytes = (size + kHugePage - 1) / kHugePage * kHugePage;
    mapped = bytes + kHugePage;
    void * m = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        throw AllocationError("cannot allocate " + std::to_string(bytes >> 20) + " MiB for a copy of the weights of '" +
                              path + "' (mmap=False): " + std::strerror(errno));
    }
    data = (uint8_t *) (((uintptr_t) m + kHugePage - 1) & ~(uintptr_t) (kHugePage - 1));
#ifdef MADV_HUGEPAGE
    ::madvise(data, bytes, MADV_HUGEPAGE);  // advice: without it the copy still works, on small pages
#endif
    return m;
}

}  // namespace

void ModelFile::bind(ggml_backend_dev_t dev, const RemoteBuft & remote, HostWeights host_weights) {
    const size_t data_offset = gguf_get_data_offset(gguf_);
    auto * const map = (uint8_t *) map_;
    auto offset = [&](const ggml_tensor * t) {
        return data_offset + gguf_get_tensor_offset(gguf_, gguf_find_tensor(gguf_, ggml_get_name(t)));
    };
    auto file_data = [&](const ggml_tensor * t) { return map + offset(t); };
    std::vector<std::pair<ggml_backend_buffer_type_t, std::vector<ggml_tensor *>>> placed;
    if (remote) {
        for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) {
            ggml_backend_buffer_type_t buft = remote(ggml_get_name(t));
            if (!buft) continue;
            auto it = std::find_if(placed.begin(), placed.end(), [&](const auto & p) { return p.first == buft; });
            if (it == placed.end()) it = placed.insert(placed.end(), {buft, {}});
            it->second.push_back(t);
        }
    }
    // Each worker's weights in one buffer, sent once (a worker started with a
    // cache keeps the large ones by hash, and is sent only the hash next time).
    for (const auto & [buft, tensors] : placed) {
        const size_t align = ggml_backend_buft_get_alignment(buft);
        size_t bytes = 0;
        for (const ggml_tensor * t : tensors) bytes += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align);
        ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(buft, bytes);
        if (!buffer) {
            throw AllocationError("cannot allocate " + std::to_string(bytes >> 20) + " MiB on " +
                                  ggml_backend_buft_name(buft) + " for the weights of '" + path_ + "'");
        }
        remote_buffers_.push_back(buffer);
        ggml_backend_buffer_set_usage(buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        ggml_tallocr alloc = ggml_tallocr_new(buffer);
        for (ggml_tensor * t : tensors) {
            if (ggml_tallocr_alloc(&alloc, t) != GGML_STATUS_SUCCESS) {
                throw AllocationError(std::string("cannot place '") + ggml_get_name(t) + "' on " +
                                      ggml_backend_buft_name(buft));
            }
            ggml_backend_tensor_set(t, file_data(t), 0, ggml_nbytes(t));
        }
    }
    const bool host = ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU;
    if (host) {
        // The mmap, or a copy of the local tensors at the file's offsets, is the
        // buffer. A plain CPU buffer, never CPU_REPACK, whose kernels are not
        // batch-invariant.
        const bool copied = host_weights == HostWeights::copied;
        uint8_t * base = map;
        if (copied) copy_ = reserve_private_memory(file_size_, path_, copy_bytes_, base);
        buffer_ = ggml_backend_cpu_buffer_from_ptr(base, file_size_);
        ggml_backend_buffer_set_usage(buffer_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) {
            if (t->buffer) continue;  // a worker's
            if (copied) std::memcpy(base + offset(t), file_data(t), ggml_nbytes(t));
            ggml_backend_tensor_alloc(buffer_, t, base + offset(t));
        }
        if (copied) ::madvise(map_, file_size_, MADV_DONTNEED);  // the map's pages: the process no longer holds them
        return;
    }
    if (!placed.empty()) throw std::invalid_argument("a split over RPC workers keeps its local layers on the CPU");
    buffer_ = allocate_tensors(meta_, ggml_backend_dev_buffer_type(dev), "the weights of '" + path_ + "'");
    ggml_backend_buffer_set_usage(buffer_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) {
        ggml_backend_tensor_set(t, file_data(t), 0, ggml_nbytes(t));
    }
}

void ModelFile::read_tensor(const ggml_tensor * t, void * dst) const {
    const int64_t id = gguf_find_tensor(gguf_, ggml_get_name(t));
    if (id < 0) throw std::logic_error(std::string("no tensor '") + ggml_get_name(t) + "' in '" + path_ + "'");
    const auto * base = (const uint8_t *) map_ + gguf_get_data_offset(gguf_) + gguf_get_tensor_offset(gguf_, id);
    std::memcpy(dst, base, ggml_nbytes(t));
}

size_t ModelFile::weight_bytes() const {
    size_t total = 0;
    for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) total += ggml_nbytes(t);
    return total;
}

}  // namespace ggspec
