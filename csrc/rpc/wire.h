// What crosses the network to ggml's RPC workers, counted where it crosses:
// the RPC client's send() and recv(), which the link wraps (vendor/ggml/rpc.cmake).
#pragma once
#include <cstdint>

namespace ggspec::rpc {

struct WireCounters {
    uint64_t bytes_sent = 0;
    uint64_t bytes_received = 0;
    // Times this process waited for a worker's answer: a receive after a send
    // on the same connection.
    uint64_t round_trips = 0;
};

WireCounters wire_counters();

// Makes a lost worker end the process with one line that names it and exit
// status 1. ggml's RPC client aborts on a failed send or receive (a core dump
// and a backtrace); this takes ggml's abort callback, so other aborts still
// print ggml's message. Idempotent.
void exit_cleanly_on_lost_worker();

// A client connection whose worker has not answered for `seconds` fails (and
// ends the process as above) instead of waiting forever on a partition.
// 0: wait forever (the default, and a worker's: it waits for its client).
void set_answer_timeout(double seconds);

}  // namespace ggspec::rpc
