#include "log.h"

#include <cstdio>

#include "ggml.h"

namespace ggspec {

namespace {
thread_local std::string * g_capture = nullptr;

void route(ggml_log_level level, const char * text, void *) {
    if (g_capture) {
        *g_capture += text;
        return;
    }
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) {
        std::fputs(text, stderr);
    }
}
}  // namespace

void install_ggml_log() { ggml_log_set(route, nullptr); }

LogCapture::LogCapture() : outer_(g_capture) { g_capture = new std::string(); }

LogCapture::~LogCapture() {
    delete g_capture;
    g_capture = outer_;
}

std::string LogCapture::text() const {
    std::string t = g_capture ? *g_capture : std::string();
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t;
}

}  // namespace ggspec
