// Exceptions the C++ core raises; bindings.cpp maps each to a Python class.
#pragma once
#include <stdexcept>
#include <string>

namespace ggspec {

// A GGUF file that is corrupt, truncated, or not a model ggspec can run.
struct ModelFormatError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A forward that would run past the context the target was created with.
struct ContextOverflowError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A buffer the model needs could not be allocated: a context or model too large
// for this machine (or a file that asks for absurd sizes).
struct AllocationError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace ggspec
