#include "rpc/kernel_worker.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "ggml-backend-impl.h"  // ggml's internal device and backend structs: the sdist's src/
#include "kernels/portable_op.h"
#include "kernels/row_matmul.h"

namespace ggspec::rpc {

namespace {

ggml_backend_dev_t cpu_device = nullptr;
ggml_status (*cpu_graph_compute)(ggml_backend_t, ggml_cgraph *) = nullptr;

ggml_status graph_compute(ggml_backend_t backend, ggml_cgraph * graph) {
    std::vector<ggml_tensor *> queries;
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
        ggml_tensor * node = ggml_graph_node(graph, i);
        if (is_custom_op(node) && !localize_row_product(node)) {
            std::fprintf(stderr, "ggspec rpc-server: a client sent a custom op ('%s') that is none of this "
                                 "version's kernels; refusing its graph\n", node->name);
            return GGML_STATUS_FAILED;
        }
        if (tag_of(node).kind == TagKind::capability_query && node->op == GGML_OP_SCALE &&
            node->type == GGML_TYPE_F32 && ggml_nbytes(node) >= sizeof(KernelCapability)) {
            queries.push_back(node);
        }
    }
    const ggml_status status = cpu_graph_compute(backend, graph);
    const KernelCapability answer{kTagMagic, kKernelAbi, row_kernel_paths_served(), 0};
    for (ggml_tensor * q : queries) std::memcpy(q->data, &answer, sizeof(answer));
    return status;
}

ggml_backend_t init_backend(ggml_backend_dev_t, const char * params) {
    ggml_backend_t backend = cpu_device->iface.init_backend(cpu_device, params);
    if (backend) {
        cpu_graph_compute = backend->iface.graph_compute;
        backend->iface.graph_compute = graph_compute;
    }
    return backend;
}

}  // namespace

ggml_backend_dev_t kernel_worker_device(ggml_backend_dev_t cpu) {
    static ggml_backend_device device;
    cpu_device = cpu;
    device = *cpu;
    device.iface.init_backend = init_backend;
    row_kernel_paths_served();  // probed now: a client's first graph does not wait for it
    return &device;
}

}  // namespace ggspec::rpc
