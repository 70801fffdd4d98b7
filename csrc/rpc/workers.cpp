#include "rpc/workers.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-rpc.h"
#include "kernels/portable_op.h"
#include "rpc/kernel_worker.h"

namespace ggspec::rpc {

namespace {

constexpr uint8_t kHelloCommand = 14;  // RPC_CMD_HELLO: fixed across protocol versions
constexpr size_t kCapsBytes = 24;      // the hello's connection capabilities (none asked for)

struct Endpoint {
    std::string host;
    std::string port;
};

Endpoint parse(const std::string & endpoint) {
    const size_t colon = endpoint.rfind(':');
    const std::string port = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
    bool numeric = !port.empty() && port.size() <= 5;
    for (char c : port) numeric = numeric && c >= '0' && c <= '9';
    if (colon == 0 || !numeric || std::stoi(port) == 0 || std::stoi(port) > 65535) {
        throw std::invalid_argument("RPC worker '" + endpoint + "' is not host:port");
    }
    return {endpoint.substr(0, colon), port};
}

// A connection with the whole exchange bounded by one deadline. Plain
// read/write: the probe is not the RPC client's traffic (wire.h counts that).
class ProbeSocket {
public:
    ProbeSocket(const std::string & endpoint, double timeout_s)
        : endpoint_(endpoint),
          deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds((int64_t) (timeout_s * 1000))) {
        const Endpoint e = parse(endpoint);
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo * found = nullptr;
        if (getaddrinfo(e.host.c_str(), e.port.c_str(), &hints, &found) != 0 || !found) {
            fail("has an unknown host '" + e.host + "'");
        }
        fd_ = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
        const int rc = fd_ < 0 ? -1 : connect(fd_, found->ai_addr, found->ai_addrlen);
        const int err = errno;
        freeaddrinfo(found);
        if (rc != 0 && err != EINPROGRESS) fail(std::string("refused the connection (") + std::strerror(err) + ")");
        wait(POLLOUT, "did not accept a connection");
        int so_error = 0;
        socklen_t len = sizeof(so_error);
        getsockopt(fd_, SOL_SOCKET, SO_ERROR, &so_error, &len);
        if (so_error != 0) {
            fail(std::string("is not running or unreachable (") + std::strerror(so_error) + ")");
        }
    }
    ~ProbeSocket() {
        if (fd_ >= 0) close(fd_);
    }

    void write_all(const void * data, size_t n) {
        for (size_t done = 0; done < n;) {
            wait(POLLOUT, "did not take the handshake");
            const ssize_t r = ::write(fd_, (const char *) data + done, n - done);
            if (r <= 0 && errno != EAGAIN) fail("closed the connection during the handshake");
            if (r > 0) done += (size_t) r;
        }
    }
    void read_all(void * data, size_t n) {
        for (size_t done = 0; done < n;) {
            wait(POLLIN, "did not answer the handshake (busy with another client, or not a ggml RPC server)");
            const ssize_t r = ::read(fd_, (char *) data + done, n - done);
            if (r == 0 || (r < 0 && errno != EAGAIN)) {
                fail("closed the connection during the handshake (not a ggml RPC server of this version?)");
            }
            if (r > 0) done += (size_t) r;
        }
    }

    [[noreturn]] void fail(const std::string & what) const {
        throw std::invalid_argument("RPC worker " + endpoint_ + " " + what);
    }

private:
    void wait(short event, const char * what) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ -
                                                                                std::chrono::steady_clock::now());
        pollfd p{fd_, event, 0};
        if (left.count() <= 0 || poll(&p, 1, (int) left.count()) != 1) fail(what);
    }

    std::string endpoint_;
    std::chrono::steady_clock::time_point deadline_;
    int fd_ = -1;
};

}  // namespace

void probe_worker(const std::string & endpoint, double timeout_s) {
    ProbeSocket s(endpoint, timeout_s);
    // | command (1) | size (8) | caps (24) |, answered by | size (8) | major minor patch pad caps |
    std::vector<uint8_t> hello(1 + 8 + kCapsBytes, 0);
    hello[0] = kHelloCommand;
    const uint64_t size = kCapsBytes;
    std::memcpy(&hello[1], &size, sizeof(size));
    s.write_all(hello.data(), hello.size());
    uint64_t answer_size = 0;
    s.read_all(&answer_size, sizeof(answer_size));
    if (answer_size != 4 + kCapsBytes) s.fail("answered the handshake with " + std::to_string(answer_size) + " bytes");
    std::vector<uint8_t> answer(answer_size);
    s.read_all(answer.data(), answer.size());
    if (answer[0] != RPC_PROTO_MAJOR_VERSION || answer[1] > RPC_PROTO_MINOR_VERSION) {
        s.fail("speaks RPC protocol " + std::to_string(answer[0]) + "." + std::to_string(answer[1]) + "." +
               std::to_string(answer[2]) + "; this build speaks " + std::to_string(RPC_PROTO_MAJOR_VERSION) + "." +
               std::to_string(RPC_PROTO_MINOR_VERSION) + " (run `ggspec rpc-server` of this version there)");
    }
}

ggml_backend_dev_t worker_device(const std::string & endpoint) {
    ggml_backend_reg_t reg = ggml_backend_rpc_add_server(endpoint.c_str());
    if (!reg || ggml_backend_reg_dev_count(reg) == 0) {
        throw std::invalid_argument("RPC worker " + endpoint + " offers no device");
    }
    return ggml_backend_reg_dev_get(reg, 0);
}

int32_t worker_kernel_paths(ggml_backend_t worker, ggml_backend_buffer_ptr & held) {
    ggml_init_params params = {2 * ggml_tensor_overhead() + ggml_graph_overhead_custom(8, false), nullptr, true};
    ggml_context_ptr ctx(ggml_init(params));
    constexpr int64_t n = sizeof(KernelCapability) / sizeof(float);
    ggml_tensor * in = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, n);
    ggml_tensor * query = ggml_scale(ctx.get(), in, 1.0f);
    set_tag(query, {kTagMagic, TagKind::capability_query, {}, 0});
    held.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), ggml_backend_get_default_buffer_type(worker)));
    if (!held) throw std::runtime_error("cannot allocate on RPC worker " + std::string(ggml_backend_name(worker)));
    const float ones[n] = {1.0f, 1.0f, 1.0f, 1.0f};
    ggml_backend_tensor_set(in, ones, 0, sizeof(ones));
    ggml_cgraph * graph = ggml_new_graph_custom(ctx.get(), 8, false);
    ggml_build_forward_expand(graph, query);
    if (ggml_backend_graph_compute(worker, graph) != GGML_STATUS_SUCCESS) return 0;
    KernelCapability answer{};
    ggml_backend_tensor_get(query, &answer, 0, sizeof(answer));
    return answer.magic == kTagMagic && answer.abi == kKernelAbi ? answer.paths : 0;
}

void serve(const std::string & endpoint, const std::string & cache_dir, int n_threads, bool kernels) {
    parse(endpoint);
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) throw std::runtime_error("this build has no CPU device to serve");
    if (kernels) cpu = kernel_worker_device(cpu);
    ggml_backend_rpc_start_server(endpoint.c_str(), cache_dir.empty() ? nullptr : cache_dir.c_str(),
                                  (size_t) std::max(1, n_threads), 1, &cpu);
    // It returns only when it could not start (its loop never ends).
    throw std::runtime_error("the RPC server could not listen at " + endpoint + " (port in use?)");
}

}  // namespace ggspec::rpc
