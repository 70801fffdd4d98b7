// ggml's log, routed: captured while a call that may fail is in progress (so
// the exception can quote ggml's reason), otherwise warnings and errors go to
// stderr and chatter is dropped.
#pragma once
#include <string>

namespace ggspec {

void install_ggml_log();

// Collects ggml's log lines for as long as it lives.
class LogCapture {
public:
    LogCapture();
    ~LogCapture();
    std::string text() const;
};

}  // namespace ggspec
