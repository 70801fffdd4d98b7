// The architectures ggspec can run, by general.architecture.
#include "models/forward_graph.h"

namespace ggspec {

extern const Architecture kLlama;
extern const Architecture kQwen3;
extern const Architecture kQwen2;
extern const Architecture kPhi3;
extern const Architecture kGemma3;
extern const Architecture kGemma4;
extern const Architecture kQwen35;
extern const Architecture kQwen35Moe;
extern const Architecture kMuseGlimmer;

static const Architecture * const kArchitectures[] = {&kLlama,  &kQwen2,  &kQwen3,     &kPhi3,       &kGemma3,
                                                        &kGemma4, &kQwen35, &kQwen35Moe, &kMuseGlimmer};

const Architecture * find_architecture(const std::string & name) {
    for (const Architecture * a : kArchitectures) {
        if (name == a->name) return a;
    }
    return nullptr;
}

std::vector<std::string> architecture_names() {
    std::vector<std::string> names;
    for (const Architecture * a : kArchitectures) names.emplace_back(a->name);
    return names;
}

std::string supported_architectures() {
    std::string s;
    for (const std::string & name : architecture_names()) s += (s.empty() ? "" : ", ") + name;
    return s;
}

}  // namespace ggspec
