#include "rpc/wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "ggml.h"

extern "C" ssize_t __real_send(int fd, const void * buf, size_t n, int flags);
extern "C" ssize_t __real_recv(int fd, void * buf, size_t n, int flags);
extern "C" int __real_connect(int fd, const sockaddr * addr, socklen_t len);

namespace ggspec::rpc {

namespace {

constexpr int kMaxFds = 4096;

std::atomic<uint64_t> g_sent{0}, g_received{0}, g_round_trips{0};
// Per connection: 1 once this process has sent on it and not yet received.
std::atomic<uint8_t> g_awaiting[kMaxFds];
std::atomic<int64_t> g_timeout_ms{0};

std::mutex g_failure_mutex;
std::string g_peer[kMaxFds];  // the worker each connection reaches, "host:port", set at connect
std::string g_failure;  // "worker 127.0.0.1:50052 closed the connection", the first one seen

std::string address_of(const sockaddr * addr) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (addr->sa_family == AF_INET) {
        const auto * a = (const sockaddr_in *) addr;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
    } else if (addr->sa_family == AF_INET6) {
        const auto * a = (const sockaddr_in6 *) addr;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
    }
    return std::string(host) + ":" + std::to_string(port);
}

void record_failure(int fd, ssize_t n, int err) {
    std::string what;
    if (n == 0) {
        what = "closed the connection";
    } else if (err == EAGAIN || err == EWOULDBLOCK) {
        char seconds[32];
        std::snprintf(seconds, sizeof(seconds), "%g", g_timeout_ms.load() / 1000.0);
        what = std::string("did not answer within ") + seconds + " s (--rpc-timeout)";
    } else {
        what = std::string("failed: ") + std::strerror(err);
    }
    std::lock_guard<std::mutex> lock(g_failure_mutex);
    const std::string peer = fd >= 0 && fd < kMaxFds && !g_peer[fd].empty() ? g_peer[fd] : "(unknown address)";
    if (g_failure.empty()) g_failure = "the RPC worker at " + peer + " " + what;
}

// Set before every receive (a system call, next to a network wait): a closed
// connection's number is reused by the next one.
void apply_timeout(int fd) {
    const int64_t ms = g_timeout_ms.load();
    if (ms <= 0) return;
    timeval tv{(time_t) (ms / 1000), (suseconds_t) ((ms % 1000) * 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

ggml_abort_callback_t g_previous_abort = nullptr;

void on_abort(const char * message) {
    std::string failure;
    {
        std::lock_guard<std::mutex> lock(g_failure_mutex);
        failure = g_failure;
    }
    if (!failure.empty()) {
        std::fprintf(stderr, "ggspec: %s; generation stopped\n", failure.c_str());
        std::fflush(stderr);
        _exit(1);
    }
    if (g_previous_abort) {
        g_previous_abort(message);
    } else {
        std::fprintf(stderr, "%s\n", message);
    }
}

}  // namespace

WireCounters wire_counters() { return {g_sent.load(), g_received.load(), g_round_trips.load()}; }

void exit_cleanly_on_lost_worker() {
    static std::once_flag once;
    std::call_once(once, [] { g_previous_abort = ggml_set_abort_callback(on_abort); });
}

void set_answer_timeout(double seconds) { g_timeout_ms = seconds > 0 ? (int64_t) (seconds * 1000) : 0; }

}  // namespace ggspec::rpc

using namespace ggspec::rpc;

extern "C" int __wrap_connect(int fd, const sockaddr * addr, socklen_t len) {
    const int r = __real_connect(fd, addr, len);
    if (r == 0 && fd >= 0 && fd < kMaxFds) {
        std::lock_guard<std::mutex> lock(g_failure_mutex);
        g_peer[fd] = address_of(addr);
    }
    return r;
}

// A lost peer raises no SIGPIPE: the send fails and is reported as above.
extern "C" ssize_t __wrap_send(int fd, const void * buf, size_t n, int flags) {
    const ssize_t r = __real_send(fd, buf, n, flags | MSG_NOSIGNAL);
    if (r > 0) {
        g_sent += (uint64_t) r;
        if (fd >= 0 && fd < kMaxFds) g_awaiting[fd] = 1;
    } else {
        record_failure(fd, r, errno);
    }
    return r;
}

extern "C" ssize_t __wrap_recv(int fd, void * buf, size_t n, int flags) {
    apply_timeout(fd);
    const ssize_t r = __real_recv(fd, buf, n, flags);
    if (r > 0) {
        g_received += (uint64_t) r;
        if (fd >= 0 && fd < kMaxFds && g_awaiting[fd].exchange(0)) ++g_round_trips;
    } else {
        const int err = errno;
        record_failure(fd, r, err);
        errno = err;
    }
    return r;
}
