// pybind11 surface of the C++ core: ggspec._core. Python owns policy; this
// module only moves token ids in and the requested arrays out.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core_latency.h"
#include "errors.h"
#include "kernels/fused_attention.h"
#include "kernels/geglu.h"
#include "kernels/masked_soft_max.h"
#include "kernels/rms_norm.h"
#include "kernels/row_argmax.h"
#include "kernels/row_matmul.h"
#include "models/forward_graph.h"
#include "target.h"
#ifdef GGSPEC_RPC
#include "rpc/wire.h"
#include "rpc/workers.h"
#endif

namespace py = pybind11;
using namespace ggspec;

namespace {

using TokenArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using FloatRows = py::array_t<float, py::array::c_style | py::array::forcecast>;

// Arrays for n_out LM-head rows (top-k or full logits) and n hidden rows, and
// where the core writes them.
struct ForwardArrays {
    ForwardOutputs out;
    py::object logits = py::none(), ids = py::none(), hidden = py::none();

    ForwardArrays(const Hparams & hp, int64_t n, int64_t n_out, int top_k, size_t n_taps) {
        if (top_k == 0) {
            auto a = py::array_t<float>({n_out, hp.n_vocab});
            out.logits = a.mutable_data();
            logits = a;
        } else {
            auto i = py::array_t<int32_t>({n_out, (int64_t) top_k});
            auto v = py::array_t<float>({n_out, (int64_t) top_k});
            out.ids = i.mutable_data();
            out.values = v.mutable_data();
            ids = i;
            logits = v;
        }
        if (n_taps > 0) {
            auto h = py::array_t<float>({n, (int64_t) n_taps * hp.n_embd});
            out.hidden = h.mutable_data();
            hidden = h;
        }
    }
    py::tuple result() const { return py::make_tuple(logits, ids, hidden); }
};

py::tuple target_forward(Target & t, const TokenArray & tokens, bool all_rows, const std::vector<int> & taps, int top_k,
                         int64_t seq) {
    if (tokens.ndim() != 1) throw std::invalid_argument("tokens must be a 1-D sequence of ids");
    const int64_t n = tokens.shape(0);
    ForwardRequest req;
    req.seq = seq;
    req.tokens = tokens.data();
    req.n_tokens = n;
    req.all_rows = all_rows;
    req.top_k = top_k;
    req.taps = taps;
    t.check_request(req);  // before sizing the outputs by it
    ForwardArrays arrays(t.hparams(), n, all_rows ? n : 1, top_k, taps.size());
    {
        py::gil_scoped_release release;
        t.forward(req, arrays.out);
    }
    return arrays.result();
}

BatchItem::Head head_from_name(const std::string & name) {
    if (name == "last") return BatchItem::Head::last;
    if (name == "all") return BatchItem::Head::all;
    if (name == "none") return BatchItem::Head::none;
    throw std::invalid_argument("a batch item's LM-head rows must be last, all or none, got '" + name + "'");
}

// items: (sequence, token ids, "last" | "all" | "none") each.
py::tuple target_forward_batch(Target & t, const std::vector<std::tuple<int64_t, TokenArray, std::string>> & items,
                               const std::vector<int> & taps, int top_k) {
    std::vector<BatchItem> batch;
    int64_t n = 0, n_out = 0;
    for (const auto & [seq, tokens, head] : items) {
        if (tokens.ndim() != 1) throw std::invalid_argument("tokens must be a 1-D sequence of ids");
        BatchItem item{seq, tokens.data(), (int64_t) tokens.shape(0), head_from_name(head)};
        n += item.n_tokens;
        n_out += item.head == BatchItem::Head::all ? item.n_tokens : item.head == BatchItem::Head::last ? 1 : 0;
        batch.push_back(item);
    }
    t.check_batch(batch, top_k, taps);
    ForwardArrays arrays(t.hparams(), n, n_out, top_k, taps.size());
    {
        py::gil_scoped_release release;
        t.forward_batch(batch, top_k, taps, arrays.out);
    }
    return arrays.result();
}

DraftHead & head_of(Target & t) {
    if (!t.draft_head()) throw std::invalid_argument("this model carries no draft head and none is attached");
    return *t.draft_head();
}

// (top-k logits, top-k ids, output row [chained_width]) for the last row, at most
// head_rows ids; top_k 0 asks for nothing (a catch-up) and returns Nones. chained: the
// rows read the head's own output rows, else the trunk's.
py::tuple head_forward(Target & t, const TokenArray & tokens, const FloatRows & hidden, int64_t start, int top_k,
                       int64_t seq, bool chained) {
    DraftHead & head = head_of(t);
    const int64_t width = chained ? head.chained_width() : head.trunk_width();
    if (tokens.ndim() != 1 || hidden.ndim() != 2 || hidden.shape(0) != tokens.shape(0) || hidden.shape(1) != width) {
        throw std::invalid_argument("a draft head takes n token ids and an [n, " + std::to_string(width) +
                                    "] array of " + (chained ? "its own output rows" : "the trunk rows") +
                                    " before them");
    }
    if (top_k < 0 || top_k > head.hparams().n_vocab) throw std::invalid_argument("top_k must be in [0, n_vocab]");
    ForwardOutputs out;
    if (top_k == 0) {
        {
            py::gil_scoped_release release;
            head.forward(tokens.data(), hidden.data(), tokens.shape(0), start, 0, out, seq, chained);
        }
        return py::make_tuple(py::none(), py::none(), py::none());
    }
    const int64_t k = std::min<int64_t>(top_k, head.head_rows());
    auto values = py::array_t<float>(k);
    auto ids = py::array_t<int32_t>(k);
    auto out_hidden = py::array_t<float>(head.chained_width());
    out.values = values.mutable_data();
    out.ids = ids.mutable_data();
    out.hidden = out_hidden.mutable_data();
    {
        py::gil_scoped_release release;
        head.forward(tokens.data(), hidden.data(), tokens.shape(0), start, top_k, out, seq, chained);
    }
    return py::make_tuple(values, ids, out_hidden);
}

BlockDrafter & drafter_of(Target & t) {
    if (!t.block_drafter()) throw std::invalid_argument("no block drafter is attached");
    return *t.block_drafter();
}

void drafter_inject(Target & t, const FloatRows & features, int64_t start, int64_t seq) {
    BlockDrafter & d = drafter_of(t);
    const int64_t width = (int64_t) d.params().target_layers.size() * t.hparams().n_embd;
    if (features.ndim() != 2 || features.shape(1) != width) {
        throw std::invalid_argument("the drafter takes [n, " + std::to_string(width) + "] rows of target features");
    }
    py::gil_scoped_release release;
    d.inject(features.data(), features.shape(0), start, seq);
}

using Bytes = py::array_t<uint8_t, py::array::c_style>;

// ([kv bytes per copy], state bytes or None): a prefix cache's copies of
// consecutive positions from pos, sizes[i] positions each.
py::tuple read_prefix(Target & t, int64_t seq, int64_t pos, const std::vector<int64_t> & sizes, bool with_state) {
    py::list arrays;
    std::vector<KvCache::HostCopy> copies;
    for (int64_t n : sizes) {
        if (n < 0) throw std::invalid_argument("a prefix copy needs n >= 0 positions, got " + std::to_string(n));
        Bytes kv((py::ssize_t) (n * (int64_t) t.kv_position_bytes()));
        copies.push_back({kv.mutable_data(), n});
        arrays.append(kv);
    }
    py::object state = py::none();
    uint8_t * state_data = nullptr;
    if (with_state) {
        Bytes s((py::ssize_t) t.seq_state_bytes());
        state_data = s.mutable_data();
        state = s;
    }
    {
        py::gil_scoped_release release;
        t.read_prefix(seq, pos, copies, state_data);
    }
    return py::make_tuple(arrays, state);
}

void append_prefix(Target & t, int64_t seq, const std::vector<Bytes> & kv, const py::object & state) {
    const size_t per = t.kv_position_bytes();
    std::vector<KvCache::HostCopy> copies;
    for (const Bytes & a : kv) {
        if (per == 0 || a.size() % (py::ssize_t) per != 0) {
            throw std::invalid_argument("a prefix copy holds whole positions of " + std::to_string(per) +
                                        " bytes, got " + std::to_string(a.size()));
        }
        copies.push_back({const_cast<uint8_t *>(a.data()), (int64_t) (a.size() / (py::ssize_t) per)});
    }
    const uint8_t * state_data = nullptr;
    Bytes s;
    if (!state.is_none()) {
        s = state.cast<Bytes>();
        if ((size_t) s.size() != t.seq_state_bytes()) {
            throw std::invalid_argument("a recurrent state copy holds " + std::to_string(t.seq_state_bytes()) +
                                        " bytes, got " + std::to_string(s.size()));
        }
        state_data = s.data();
    }
    py::gil_scoped_release release;
    t.append_prefix(seq, copies, state_data);
}

// (values [rows, k], ids [rows, k], pairs [rows - 1, k, k] or None) of the block's MASK rows.
py::tuple drafter_draft(Target & t, int32_t anchor, int64_t pos0, int64_t n_block, int top_k, int64_t seq) {
    BlockDrafter & d = drafter_of(t);
    BlockDraft out;
    {
        py::gil_scoped_release release;
        out = d.draft(anchor, pos0, n_block, top_k, seq);
    }
    auto values = py::array_t<float>({out.rows, out.k}, out.values.data());
    auto ids = py::array_t<int32_t>({out.rows, out.k}, out.ids.data());
    py::object pairs = py::none(), confidence = py::none();
    if (d.params().selects()) pairs = py::array_t<float>({out.rows - 1, out.k, out.k}, out.pairs.data());
    if (!out.confidence.empty()) confidence = py::array_t<float>(out.rows, out.confidence.data());
    return py::make_tuple(values, ids, pairs, confidence);
}

// ggspec.errors' classes, held for the module's lifetime (never released: the
// interpreter may be finalising when the last exception is raised).
PyObject * g_model_format_error = nullptr;
PyObject * g_context_overflow_error = nullptr;
PyObject * g_allocation_error = nullptr;

// A C++ message may carry bytes that are not UTF-8 (a name from a corrupt file):
// decode with replacement, so the message always reaches Python.
void raise(PyObject * type, const char * what) {
    PyObject * message = PyUnicode_DecodeUTF8(what, (Py_ssize_t) std::strlen(what), "replace");
    PyErr_SetObject(type, message);
    Py_XDECREF(message);
}

void translate(std::exception_ptr p) {
    try {
        if (p) std::rethrow_exception(p);
    } catch (const ModelFormatError & e) {
        raise(g_model_format_error, e.what());
    } catch (const ContextOverflowError & e) {
        raise(g_context_overflow_error, e.what());
    } catch (const AllocationError & e) {
        raise(g_allocation_error, e.what());
    } catch (const std::bad_alloc &) {
        // a host allocation sized by the file or the options: a bad input, not the interpreter's memory
        raise(g_allocation_error, "out of host memory for the sizes this file or these options ask for");
    } catch (const std::out_of_range & e) {
        raise(PyExc_IndexError, e.what());
    } catch (const std::overflow_error & e) {
        raise(PyExc_OverflowError, e.what());
    } catch (const std::invalid_argument & e) {
        raise(PyExc_ValueError, e.what());
    } catch (const std::length_error & e) {
        raise(PyExc_ValueError, e.what());
    } catch (const std::range_error & e) {
        raise(PyExc_ValueError, e.what());
    } catch (const py::builtin_exception &) {
        throw;  // pybind11's own (a cast error): its translator knows them
    } catch (const py::error_already_set &) {
        throw;
    } catch (const std::exception & e) {
        raise(PyExc_RuntimeError, e.what());
    }
}

// ggml's RPC backend, when this build has it (vendor/ggml/rpc.cmake).
void bind_rpc(py::module_ & m) {
#ifdef GGSPEC_RPC
    m.attr("rpc_available") = true;
    m.def("rpc_serve", &rpc::serve, py::arg("endpoint"), py::arg("cache_dir"), py::arg("n_threads"),
          py::arg("kernels"), py::call_guard<py::gil_scoped_release>(),
          "Serves this host's CPU to RPC clients; returns only on failure.");
    m.def("rpc_wire_counters", [] {
        const rpc::WireCounters c = rpc::wire_counters();
        return py::make_tuple(c.round_trips, c.bytes_sent, c.bytes_received);
    }, "(round trips, bytes sent, bytes received) of this process's RPC connections so far.");
#else
    m.attr("rpc_available") = false;
#endif
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "ggspec's C++ core: GGUF targets as persistent ggml graphs";

    py::module_ errors = py::module_::import("ggspec.errors");
    g_model_format_error = py::object(errors.attr("ModelFormatError")).release().ptr();
    g_context_overflow_error = py::object(errors.attr("ContextOverflowError")).release().ptr();
    g_allocation_error = py::object(errors.attr("AllocationError")).release().ptr();
    m.attr("ModelFormatError") = errors.attr("ModelFormatError");
    m.attr("ContextOverflowError") = errors.attr("ContextOverflowError");
    m.attr("AllocationError") = errors.attr("AllocationError");
    py::register_exception_translator(translate);

    py::class_<Target>(m, "Target")
        .def(py::init([](const std::string & path, int64_t n_ctx, int n_threads, const std::string & device,
                         const std::string & kv_type, int64_t prefill_chunk, int64_t max_verify_rows,
                         double graph_budget_mb, const std::string & row_kernels, const std::string & recurrent_rollback,
                         double recurrent_snapshot_mb, const std::vector<std::string> & rpc,
                         const std::vector<float> & tensor_split, double rpc_timeout_s, bool mmap) {
                 TargetOptions o;
                 o.n_ctx = n_ctx;
                 o.n_threads = n_threads;
                 o.device = device;
                 o.kv_type = kv_type;
                 o.prefill_chunk = prefill_chunk;
                 o.max_verify_rows = max_verify_rows;
                 o.graph_budget_bytes = (size_t) (graph_budget_mb * 1024 * 1024);
                 o.row_kernels = row_kernels;
                 o.recurrent_rollback = recurrent_rollback;
                 if (recurrent_snapshot_mb <= 0) throw std::invalid_argument("recurrent_snapshot_mb must be positive");
                 o.recurrent_snapshot_bytes = (size_t) (recurrent_snapshot_mb * 1024 * 1024);
                 o.rpc = rpc;
                 o.tensor_split = tensor_split;
                 o.rpc_timeout_s = rpc_timeout_s;
                 o.mmap = mmap;
                 py::gil_scoped_release release;
                 return std::make_unique<Target>(path, o);
             }),
             py::arg("path"), py::arg("n_ctx") = 4096, py::arg("n_threads") = 0, py::arg("device") = "auto",
             py::arg("kv_type") = "f16", py::arg("prefill_chunk") = 512, py::arg("max_verify_rows") = 65,
             py::arg("graph_budget_mb") = 0.0, py::arg("row_kernels") = "auto",
             py::arg("recurrent_rollback") = "snapshots", py::arg("recurrent_snapshot_mb") = 512.0,
             py::arg("rpc") = std::vector<std::string>{}, py::arg("tensor_split") = std::vector<float>{},
             py::arg("rpc_timeout_s") = 0.0, py::arg("mmap") = true)
        .def("forward", &target_forward, py::arg("tokens"), py::arg("all_rows") = false,
             py::arg("taps") = std::vector<int>{}, py::arg("top_k") = 0, py::arg("seq") = 0,
             "Returns (logits_or_topk_values, topk_ids_or_None, hidden_or_None).")
        .def("forward_batch", &target_forward_batch, py::arg("items"), py::arg("taps") = std::vector<int>{},
             py::arg("top_k") = 0,
             "items: (sequence, token ids, 'last' | 'all' | 'none'); returns forward's tuple, LM-head rows in item order.")
        .def("rewind", &Target::rewind, py::arg("length"), py::arg("seq") = 0)
        .def("reset", &Target::reset)
        .def("reset_seq", &Target::reset_seq, py::arg("seq"))
        .def("pause_threads", &Target::pause_threads, py::call_guard<py::gil_scoped_release>())
        .def("set_n_seqs", &Target::set_n_seqs, py::arg("n"))
        .def_property_readonly("n_seqs", &Target::n_seqs)
        .def_property_readonly("max_batch_rows", &Target::max_batch_rows)
        .def("seq_len_of", &Target::seq_len, py::arg("seq"))
        .def("head_forward", &head_forward, py::arg("tokens"), py::arg("hidden"), py::arg("start"), py::arg("top_k"),
             py::arg("seq") = 0, py::arg("chained") = false,
             "Draft-head rows for the tokens at positions start..; returns (top-k logits, top-k ids, output row) of "
             "the last row.")
        .def(
            "head_skip", [](Target & t, int64_t from, int64_t to, int64_t seq) { head_of(t).skip(from, to, seq); },
            py::arg("from"), py::arg("to"), py::arg("seq") = 0,
            "Forgets the head's positions from `from` on and goes on at `to`, the ones between masked.")
        .def("attach_draft_head", &Target::attach_draft_head, py::arg("path"), py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("has_draft_head", [](Target & t) { return t.draft_head() != nullptr; })
        .def_property_readonly("head_graph_calls",
                               [](Target & t) { return t.draft_head() ? t.draft_head()->graph_calls() : 0; })
        .def_property_readonly("head_seq_len", [](Target & t) { return t.draft_head() ? t.draft_head()->seq_len() : 0; })
        .def_property_readonly("head_trunk_taps", [](Target & t) { return head_of(t).model().trunk_taps; })
        .def_property_readonly("head_trunk_width", [](Target & t) { return head_of(t).trunk_width(); })
        .def_property_readonly("head_chained_width", [](Target & t) { return head_of(t).chained_width(); })
        .def("attach_drafter", &Target::attach_drafter, py::arg("path"), py::arg("use_conv") = true,
             py::arg("use_selector") = true, py::arg("fused") = true, py::call_guard<py::gil_scoped_release>())
        .def("drafter_inject", &drafter_inject, py::arg("features"), py::arg("start"), py::arg("seq") = 0)
        .def("drafter_draft", &drafter_draft, py::arg("anchor"), py::arg("pos0"), py::arg("n_block"), py::arg("top_k"),
             py::arg("seq") = 0)
        .def_property_readonly("has_block_drafter", [](Target & t) { return t.block_drafter() != nullptr; })
        .def_property_readonly("drafter_path", [](Target & t) { return drafter_of(t).path(); })
        .def_property_readonly("drafter_target_layers", [](Target & t) { return drafter_of(t).params().target_layers; })
        .def_property_readonly("drafter_block_size", [](Target & t) { return drafter_of(t).params().block_size; })
        .def_property_readonly("drafter_mask_token", [](Target & t) { return drafter_of(t).params().mask_token; })
        .def_property_readonly("drafter_seq_len", [](Target & t) { return drafter_of(t).seq_len(); })
        .def_property_readonly("drafter_graph_calls", [](Target & t) { return drafter_of(t).graph_calls(); })
        .def_property_readonly("drafter_inject_seconds", [](Target & t) { return drafter_of(t).inject_seconds(); })
        .def_property_readonly("drafter_draft_seconds", [](Target & t) { return drafter_of(t).draft_seconds(); })
        .def_property_readonly("drafter_readback_bytes", [](Target & t) { return drafter_of(t).readback_bytes(); })
        .def_property_readonly("drafter_is_lattice", [](Target & t) { return drafter_of(t).params().selects(); })
        .def_property_readonly("drafter_is_dspark", [](Target & t) { return drafter_of(t).params().dspark; })
        .def_property_readonly("drafter_first_draft_row",
                               [](Target & t) { return drafter_of(t).params().first_draft_row(); })
        .def_property_readonly("drafter_head_rows", [](Target & t) { return drafter_of(t).head_rows(); })
        .def("set_recurrent_rollback", &Target::set_recurrent_rollback, py::arg("name"))
        .def("snapshot_recurrent", &Target::snapshot_recurrent, py::arg("seq") = 0)
        .def("restore_recurrent", &Target::restore_recurrent, py::arg("seq") = 0)
        .def("read_recurrent_state", &Target::read_recurrent_state, py::arg("seq") = 0,
             "Each recurrent layer's conv state, then its delta-rule state, as flat float32 lists (for tests).")
        .def_property_readonly("verify_persists_accepted_kv", &Target::verify_persists_accepted_kv)
        .def_property_readonly("max_verify_rows", &Target::max_verify_rows)
        .def_property_readonly("recurrent_state_bytes", &Target::recurrent_state_bytes)
        .def_property_readonly("state_row_bytes", &Target::state_row_bytes)
        .def_property_readonly("state_transfer_bytes", py::overload_cast<>(&Target::state_transfer_bytes, py::const_))
        .def("state_transfer_bytes_of", py::overload_cast<int64_t>(&Target::state_transfer_bytes, py::const_),
             py::arg("seq"))
        .def_property_readonly("state_commits", &Target::state_commits)
        .def("read_prefix", &read_prefix, py::arg("seq"), py::arg("pos"), py::arg("sizes"), py::arg("with_state"))
        .def("append_prefix", &append_prefix, py::arg("seq"), py::arg("kv"), py::arg("state") = py::none())
        .def_property_readonly("kv_position_bytes", &Target::kv_position_bytes)
        .def_property_readonly("seq_state_bytes", &Target::seq_state_bytes)
        .def("ensure_capacity", &Target::ensure_capacity, py::arg("n"))
        .def_property_readonly("seq_len", [](const Target & t) { return t.seq_len(); })
        .def_property_readonly("n_ctx", &Target::n_ctx)
        .def_property_readonly("graph_builds", &Target::graph_builds)
        .def_property_readonly("graphs_cached", &Target::graphs_cached)
        .def_property_readonly("device", &Target::device_name)
        .def_property_readonly("n_threads", &Target::n_threads)
        .def_property_readonly("lm_head_row_kernel", &Target::lm_head_row_kernel)
        .def_property_readonly("packed_weight_bytes", &Target::packed_weight_bytes)
        .def_property_readonly("row_kernels", &Target::row_kernels)
        .def_property_readonly("placement", &Target::placement)
        .def_property_readonly("weight_bytes", &Target::weight_bytes)
        .def_property_readonly("kv_bytes", &Target::kv_bytes)
        .def_property_readonly("arch", [](const Target & t) { return t.hparams().arch; })
        .def_property_readonly("n_vocab", [](const Target & t) { return t.hparams().n_vocab; })
        .def_property_readonly("n_embd", [](const Target & t) { return t.hparams().n_embd; })
        .def_property_readonly("n_layer", [](const Target & t) { return t.hparams().n_layer; })
        .def_property_readonly("n_swa", [](const Target & t) { return t.hparams().n_swa; });

    m.def(
        "quantize",
        [](const std::string & type_name, py::array_t<float, py::array::c_style | py::array::forcecast> data) {
            if (data.ndim() != 2) throw std::invalid_argument("quantize takes a 2-D [rows, n_per_row] array");
            const int64_t rows = data.shape(0), n_per_row = data.shape(1);
            std::vector<uint8_t> bytes = quantize_rows(type_name, data.data(), rows, n_per_row);
            auto out = py::array_t<uint8_t>({rows, (int64_t) (bytes.size() / std::max<int64_t>(rows, 1))});
            std::memcpy(out.mutable_data(), bytes.data(), bytes.size());
            return out;
        },
        py::arg("type_name"), py::arg("data"), "ggml's quantization of f32 rows (for writing test models).");
    m.def("architectures", &architecture_names,
          "The general.architecture values ggspec runs as a target (or as a draft model).");
    m.def(
        "core_round_trip_ns",
        [](int cpu_a, int cpu_b, int trips) {
            if (trips < 1 || trips > 10000000) throw std::invalid_argument("core_round_trip_ns takes 1 to 10^7 trips");
            py::gil_scoped_release unlocked;
            return core_round_trip_ns(cpu_a, cpu_b, trips);
        },
        py::arg("cpu_a"), py::arg("cpu_b"), py::arg("trips") = 20000,
        "The mean round trip in ns of a cache line between threads pinned to two CPUs (negative where they "
        "cannot be pinned): how far apart the host has put them, which benchmarks tag their samples with.");
    m.def(
        "row_kernel_paths",
        [] {
            std::vector<std::string> paths;
            for (RowKernels path : {RowKernels::vnni, RowKernels::avx2, RowKernels::vnni_block}) {
                if (row_kernels_cpu(path)) paths.push_back(row_kernels_name(path));
            }
            return paths;
        },
        "The multi-row kernel paths this CPU runs: those with ggml's bits best first, then vnni-block (whether a "
        "model uses one also needs its weight types and a probe that matches the path's reference).");
    m.def(
        "deal_runs",
        [](int64_t total, int64_t rows, const std::vector<double> & ms_per_run) {
            const int n_threads = (int) ms_per_run.size();
            if (total < 0 || total > INT32_MAX || rows < 1 || n_threads < 1 || n_threads > GGML_MAX_N_THREADS) {
                throw std::invalid_argument("deal_runs takes 0 <= total < 2^31 runs, rows >= 1 and 1-512 threads");
            }
            auto dealer = std::make_unique<RunDealer>();
            std::vector<std::atomic<int>> times((size_t) total);
            std::vector<int> taker((size_t) total, -1);
            {
                py::gil_scoped_release unlocked;
                std::vector<std::thread> threads;
                for (int t = 0; t < n_threads; ++t) {
                    threads.emplace_back([&, t] {
                        dealer->share(t, n_threads, total, rows, [&](int64_t first, int64_t end) {
                            for (int64_t r = first; r < end; ++r) {
                                const std::chrono::duration<double, std::milli> pause(ms_per_run[(size_t) t]);
                                if (pause.count() > 0) std::this_thread::sleep_for(pause);
                                times[(size_t) r].fetch_add(1);
                                taker[(size_t) r] = t;
                            }
                        });
                    });
                }
                for (std::thread & th : threads) th.join();
            }
            std::vector<int> counts((size_t) total);
            for (size_t r = 0; r < counts.size(); ++r) counts[r] = times[r].load();
            return py::make_tuple(taker, counts);
        },
        py::arg("total"), py::arg("rows"), py::arg("ms_per_run"),
        "For tests: one thread per entry of ms_per_run shares `total` weight runs of a product of `rows` activation "
        "rows as a multi-row product's threads do (RunDealer), each sleeping its entry's milliseconds a run. "
        "Returns (the thread that took each run, how many times each run was taken).");
    m.def("masked_soft_max_usable", &masked_soft_max_usable,
          "Whether attention's softmax runs on ggspec's op (over the keys each mask row leaves) on the kernel paths: "
          "this CPU runs it and its probe found ggml's bits.");
    m.def("fused_attention_usable", &fused_attention_usable,
          "Whether attention runs as one op (kernels/fused_attention.h) on the kernel paths: this CPU runs it and its "
          "probe found the bits of the chain it replaces.");
    m.def("row_argmax_usable", &row_argmax_usable,
          "Whether the greedy pick runs on ggspec's op (rows split between threads, vectorized) on the kernel paths: "
          "this CPU runs it and its probe found ggml_argmax's indices.");
    m.def("geglu_usable", &geglu_usable,
          "Whether GeGLU FFNs (Gemma) take ggspec's op (values split between threads, eight tabled GELUs looked up "
          "at once) on the kernel paths: this CPU runs it and its probe found ggml's bits.");
    m.def("rms_norm_usable", &rms_norm_usable,
          "Whether RMS norms times their weight take ggspec's op (8 rows' sums of squares at once, each thread a "
          "contiguous share of the rows) on the kernel paths: this CPU runs it and its probe found ggml's bits.");
    bind_rpc(m);
}
