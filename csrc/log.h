// ggml's log, routed: captured while a call that may fail is in progress (so
// the exception can quote ggml's reason), otherwise warnings and errors go to
// stderr and chatter is dropped.
#pragma once
#include <string>

namespace ggspec {

void install_ggml_log();

// Collects ggml's log lines for as long as it lives (an inner capture hides its
// lines from an outer one and hands it back on destruction).
class LogCapture {
public:
    LogCapture();
    ~LogCapture();
    LogCapture(const LogCapture &) = delete;
    LogCapture & operator=(const LogCapture &) = delete;
    std::string text() const;

private:
    std::string * outer_;
};

}  // namespace ggspec
