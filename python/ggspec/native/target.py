"""The target adapter: a GGUF model that runs batched, bit-exact verify forwards.

Row i of a k-row `spec_forward` gives the same bits as the one-row step at that
position, so a speculative step can never change what plain decoding emits.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

import ggspec._core as _core
from ggspec.errors import ContextOverflowError, ModelFormatError
from ggspec.native.block_drafter import BlockDrafter
from ggspec.native.draft_model import DraftModel, DraftSequence
from ggspec.native.draft_head import DraftHead

Tap = Union[int, str]  # a layer index (that layer's input) or "final" (after the final norm)


@dataclass(frozen=True)
class BatchItem:
    """One sequence's rows in a forward_batch: head "last", "all" or "none" (see there)."""

    seq: int
    tokens: Sequence[int] | np.ndarray
    head: str = "last"


@dataclass(frozen=True)
class ForwardResult:
    """What one forward returns; only what was asked for crosses to the host.

    logits: float32 [n_rows, n_vocab] with all_logits, else [1, n_vocab]; with
        top_k > 0, the top-k logits [n_out, top_k], best first.
    ids: int32 [n_out, top_k] token ids matching `logits` when top_k > 0, else None.
    hidden: float32 [n_rows, len(hidden_layers) * n_embd], or None.
    """

    logits: np.ndarray
    ids: np.ndarray | None
    hidden: np.ndarray | None


def token_array(tokens: Sequence[int] | np.ndarray, n_vocab: int) -> np.ndarray:
    """Token ids as int32, exactly: a float, a wrong shape or an id outside [0, n_vocab)
    is a ValueError naming it (never wrapped, truncated or clipped)."""
    array = np.asarray(tokens)
    if array.ndim != 1:
        raise ValueError(f"token ids must be a flat sequence, got an array of shape {array.shape}")
    if array.size and not (np.issubdtype(array.dtype, np.integer) or array.dtype == object):
        raise ValueError(f"token ids must be integers, got {array.dtype} values such as {array.flat[0]!r}")
    ids = [_index("token id", t) for t in array.tolist()] if array.dtype == object else array
    ids = np.asarray(ids, dtype=np.int64)
    bad = np.flatnonzero((ids < 0) | (ids >= n_vocab))
    if bad.size:
        raise ValueError(f"token id {int(ids[bad[0]])} (at index {int(bad[0])}) is outside the vocabulary "
                         f"[0, {n_vocab})")
    return ids.astype(np.int32)


def _index(what: str, value) -> int:
    """An integer argument, as an int within int64 (a float or an overflowing value is a ValueError)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    value = int(value)
    if not -(1 << 62) <= value < (1 << 62):
        raise ValueError(f"{what} {value} is out of range")
    return value


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def physical_cores() -> int:
    """Physical cores this process may run on (hyperthreads slow ggml's decode)."""
    allowed = usable_cpus()
    cores = set()
    try:
        with open("/proc/cpuinfo") as f:
            phys = core = None
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    phys = value.strip()
                elif key == "core id":
                    core = value.strip()
                elif not line.strip() and core is not None:
                    cores.add((phys, core))
                    phys = core = None
            if core is not None:
                cores.add((phys, core))
    except OSError:
        pass
    return max(1, min(allowed, len(cores) or allowed))


class Target:
    """A loaded model: the `SpeculativeTarget` the speculative runtime drives.

    Safe to call from several threads: calls are serialised, one at a time. A
    sequence is still one sequence, though: use an Engine to share a model."""

    def __init__(self, core: _core.Target, path: str, kv_type: str = "f16", mmap: bool = True):
        self._core = core
        self.path = path
        self.kv_type = kv_type  # as loaded: an attached draft model's cache takes the same type
        self.mmap = mmap  # and its weights the same memory
        # Every call into the core (the head's and the drafter's too) holds this lock:
        # forwards release the GIL, and two threads inside one model corrupt it.
        self._lock = threading.RLock()
        self._draft_head = None
        self._block_drafter = None
        self._draft_model = None
        # per sequence, a value that changes whenever its cache does (sequence_stamp)
        self._stamps: list[int] = [0]
        self._clock = 0

    # --- shape ---------------------------------------------------------------
    arch = property(lambda self: self._core.arch)
    n_vocab = property(lambda self: self._core.n_vocab)
    n_embd = property(lambda self: self._core.n_embd)
    n_layer = property(lambda self: self._core.n_layer)
    device = property(lambda self: self._core.device)
    n_threads = property(lambda self: self._core.n_threads)
    lm_head_row_kernel = property(lambda self: self._core.lm_head_row_kernel)
    #: bytes of weights repacked in private memory for the kernels (row_kernels="vnni-block" packs
    #: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K matrices 16 rows to a register at their first product)
    packed_weight_bytes = property(lambda self: self._core.packed_weight_bytes)
    #: the multi-row kernel path this target chose: "vnni", "vnni-block", "avx2" or "off" (each
    #: weight type runs on it where it has a kernel whose probe matched the path's reference:
    #: lm_head_row_kernel)
    row_kernels = property(lambda self: self._core.row_kernels)
    #: where the trunk's layers run: "layers 0-11 on CPU", or runs of them on RPC workers
    placement = property(lambda self: self._core.placement)

    @property
    def draft_head(self) -> DraftHead | None:
        """The per-token draft head: an EAGLE-3 drafter or a Gemma 4 assistant attached with
        attach_draft_head, else the MTP/NextN head the file carries, else None."""
        if self._core.has_draft_head and self._draft_head is None:
            self._draft_head = DraftHead(self._core, self._lock, self.path)
        return self._draft_head

    def attach_draft_head(self, path: str | os.PathLike) -> DraftHead:
        """Attaches a drafter GGUF in llama.cpp's format as this target's draft head, in place
        of the file's own: an EAGLE-3 drafter (general.architecture "eagle3") or a Gemma 4
        assistant ("gemma4-assistant", which attends over a gemma4 target's cache). Raises
        ModelFormatError naming what does not fit (the target width it reads, its tapped
        layers, the head sizes and layers whose KV it shares, the vocabulary); the target
        keeps the head it had."""
        with self._lock:
            self._core.attach_draft_head(os.fspath(path))
            self._draft_head = DraftHead(self._core, self._lock, os.fspath(path))
        return self._draft_head

    @property
    def block_drafter(self) -> BlockDrafter | None:
        """The block drafter attached with attach_drafter, or None."""
        return self._block_drafter

    @property
    def draft_model(self) -> DraftSequence | None:
        """The draft language model attached with attach_draft_model, on sequence 0, or None."""
        return None if self._draft_model is None else DraftSequence(self._draft_model)

    def attach_draft_model(self, path: str | os.PathLike, *, n_threads: int | None = None) -> DraftSequence:
        """Loads a smaller language model of the same vocabulary (its own GGUF) to draft for
        this target: its context, device, KV type and multi-row kernel path are this
        target's, a sequence of it per sequence of this, with n_threads threads (default:
        this target's), which take turns with this target's on the same cores; its weights are
        mapped or copied (mmap) as this target's. Replaces the
        one attached before. Raises ModelFormatError for a file ggspec cannot run; the
        vocabulary is the caller's to check (ggspec.text.vocab_match)."""
        path = os.fspath(path)
        draft = load(path, n_ctx=self.max_context_length, n_threads=self.n_threads if n_threads is None else n_threads,
                     max_verify_rows=self.max_verify_rows, device=self.device, row_kernels=self.row_kernels,
                     kv_type=self.kv_type, mmap=self.mmap)
        with self._lock:
            self._draft_model = DraftModel(draft, self, path, threads_asked=n_threads)
        return DraftSequence(self._draft_model)

    def pause_threads(self) -> None:
        """Puts this target's CPU threads to sleep until its next forward (instead of their
        polling for it): another model is about to compute on the same cores."""
        with self._lock:
            self._core.pause_threads()

    @property
    def drafter(self) -> BlockDrafter | DraftHead | None:
        """The drafter speculation uses by default: a block drafter, else the draft head."""
        return self._block_drafter or self.draft_head

    def attach_drafter(self, path: str | os.PathLike, *, conv: bool = True, selector: bool = True,
                       fused: bool = True) -> BlockDrafter:
        """Attaches a DFlash drafter GGUF (general.architecture "dflash") to this target.
        Raises ModelFormatError naming what does not fit (width, target layers, vocabulary,
        mask token).

        conv, selector: DFlash2's grouped conv and candidate selector, for attribution (the
        drafter's weights were trained with both on). fused=False: the per-op reference path
        (every node its own dispatch) the one-graph passes are checked against."""
        with self._lock:
            self._core.attach_drafter(os.fspath(path), use_conv=conv, use_selector=selector, fused=fused)
            self._block_drafter = BlockDrafter(self._core, self._lock, conv=conv, selector=selector, fused=fused)
        return self._block_drafter

    @property
    def verify_persists_accepted_kv(self) -> bool:
        """Whether a verify leaves its accepted rows in the cache, so that a rollback
        is a rewind and never a re-forward: always, except on a recurrent trunk's
        "reforward" rollback path."""
        return self._core.verify_persists_accepted_kv

    @property
    def recurrent(self) -> bool:
        """Whether the trunk has recurrent layers (qwen35): each sequence keeps its state."""
        return self._core.recurrent_state_bytes > 0

    @property
    def memory(self) -> dict[str, int]:
        """What the caches take, in bytes: the KV cache (every sequence's region, each
        the same size), the recurrent states (one per sequence), and what a verify keeps
        per row to roll back without a re-forward; a batch keeps at most max_verify_rows
        such rows for each verifying sequence, in its graph's memory; with a draft model
        attached, its KV and recurrent states (draft_model_bytes)."""
        with self._lock:
            n = self._core.n_seqs
            memory = {"sequences": n, "kv_bytes": self._core.kv_bytes, "kv_bytes_per_sequence": self._core.kv_bytes // n,
                      "recurrent_state_bytes": self._core.recurrent_state_bytes,
                      "verify_row_state_bytes": self._core.state_row_bytes}
        if self._draft_model is not None:  # the draft model's caches: its KV and states, every sequence's
            draft = self._draft_model.target.memory
            memory["draft_model_bytes"] = draft["kv_bytes"] + draft["recurrent_state_bytes"]
        return memory

    @property
    def max_verify_rows(self) -> int:
        """The most rows a verify may have and still roll back (the runtime caps drafts
        at one less): on a recurrent trunk, what its snapshot budget holds."""
        return self._core.max_verify_rows

    @property
    def state_transfer_bytes(self) -> int:
        """Recurrent-state bytes moved between host and device so far (0 on the default path)."""
        return self._core.state_transfer_bytes

    def sequence_state_transfer_bytes(self, seq: int) -> int:
        """The same for one sequence, since the cache was sized (set_sequences)."""
        with self._lock:
            return self._core.state_transfer_bytes_of(_index("sequence", seq))

    @property
    def cache_seq_len(self) -> int:
        """Positions currently held in the KV cache."""
        return self._core.seq_len

    @property
    def max_context_length(self) -> int:
        return self._core.n_ctx

    @property
    def graph_builds(self) -> int:
        """Forward graphs built so far (an attached draft model's too); steady-state decoding
        replays them and builds none."""
        draft = self._draft_model
        return self._core.graph_builds + (0 if draft is None else draft.target.graph_builds)

    # --- forward -------------------------------------------------------------
    def spec_forward(
        self,
        tokens: Sequence[int] | np.ndarray,
        *,
        all_logits: bool = False,
        hidden_layers: Sequence[Tap] = (),
        top_k: int = 0,
        seq: int = 0,
    ) -> ForwardResult:
        """Appends `tokens` to the sequence as ONE batched forward (chunked for long prefills).

        all_logits: LM head on every row (a verify) or only the last (a decode step).
        hidden_layers: taps; an int i < n_layer is the input of layer i, "final" is the
            trunk's output after the final norm.
        top_k: 0 returns full logits; k > 0 returns the top k ids and logits per row,
            computed in the graph (k = 1 is the argmax), best first, ties to the lower id.
        seq: which of the cache's sequences (set_sequences) the tokens continue.
        """
        taps = [self._tap_index(t) for t in hidden_layers]
        ids_in = token_array(tokens, self.n_vocab)
        with self._lock:
            self._touch(seq)
            values, ids, hidden = self._core.forward(ids_in, all_logits, taps, int(top_k), _index("sequence", seq))
        return ForwardResult(logits=values, ids=ids, hidden=hidden)

    def forward_batch(self, items: Sequence[BatchItem], *, hidden_layers: Sequence[Tap] = (),
                      top_k: int = 0) -> ForwardResult:
        """Several sequences' rows as ONE forward: each row gets the bits that its
        sequence alone would get (spec_forward on it), whatever the other items are.

        items: BatchItem(seq, tokens, head) each, a sequence at most once; head "last"
            (the LM head on its last row), "all" (on every row: a verify) or "none" (a
            prompt chunk before the prompt's end). At most max_batch_rows tokens each.
        The result's logits/ids hold the LM-head rows in item order; hidden, every row.
        """
        taps = [self._tap_index(t) for t in hidden_layers]
        batch = [(_index("sequence", item.seq), token_array(item.tokens, self.n_vocab), item.head) for item in items]
        with self._lock:
            self._touch(*(seq for seq, _, _ in batch))
            values, ids, hidden = self._core.forward_batch(batch, taps, int(top_k))
        return ForwardResult(logits=values, ids=ids, hidden=hidden)

    @property
    def sequences(self) -> int:
        """How many sequences the KV cache holds, each max_context_length positions."""
        return self._core.n_seqs

    def set_sequences(self, n: int) -> None:
        """Sizes the KV cache for n sequences (each of max_context_length positions), with
        a recurrent state for each on a recurrent trunk (qwen35), and the drafters' caches.
        A change empties every sequence."""
        n = _index("sequences", n)
        with self._lock:
            try:
                self._core.set_n_seqs(n)
            finally:
                self._stamps = [0] * self._core.n_seqs
                self._touch(*range(self._core.n_seqs))
            if self._draft_model is not None:
                self._draft_model.set_sequences(self._core.n_seqs)

    @property
    def max_batch_rows(self) -> int:
        """The most rows one forward_batch item may append to its sequence."""
        return self._core.max_batch_rows

    def sequence_length(self, seq: int) -> int:
        """Positions sequence `seq` holds in the cache."""
        with self._lock:
            return self._core.seq_len_of(_index("sequence", seq))

    def _tap_index(self, tap: Tap) -> int:
        if tap == "final":
            return -1
        if isinstance(tap, (int, np.integer)) and 0 <= tap < self.n_layer:
            return int(tap)
        raise ValueError(f"hidden tap {tap!r} is neither 'final' nor a layer index in [0, {self.n_layer})")

    # --- what a sequence holds ------------------------------------------------
    def sequence_stamp(self, seq: int) -> int:
        """A value that changes whenever sequence seq's cache does (a forward, rewind,
        reset or copy): equal stamps mean it holds what it held."""
        return self._stamps[seq]

    def _touch(self, *seqs: int) -> None:
        for seq in seqs:
            if isinstance(seq, int) and 0 <= seq < len(self._stamps):  # the core names a bad one
                self._clock += 1
                self._stamps[seq] = self._clock

    @property
    def kv_position_bytes(self) -> int:
        """What one position of a sequence's KV takes, every attention layer's K and V."""
        return self._core.kv_position_bytes

    @property
    def sequence_state_bytes(self) -> int:
        """What one sequence's recurrent state takes (0: an attention-only trunk)."""
        return self._core.seq_state_bytes

    def read_prefix(self, seq: int, position: int, sizes: Sequence[int], *, state: bool = False):
        """Copies of consecutive positions of sequence seq's KV from `position`, sizes[i]
        positions each (uint8, sizes[i] * kv_position_bytes), which a sliding-window ring
        must still hold; with state=True also the recurrent state after them, which must
        be the sequence's end. Returns ([copies], state or None). Reading several copies
        at once touches each of V's rows once (V is transposed), not once per copy."""
        sizes = [_index("copy size", n) for n in sizes]
        with self._lock:
            return self._core.read_prefix(_index("sequence", seq), _index("position", position), sizes, bool(state))

    def append_prefix(self, seq: int, copies: Sequence[np.ndarray], state: np.ndarray | None = None) -> None:
        """Appends read_prefix copies, in order, to sequence seq's end, as if their
        positions had been forwarded there. On a recurrent trunk the sequence runs again
        once a state (the one after the copies) brought its state to its length."""
        with self._lock:
            self._touch(seq)
            self._core.append_prefix(_index("sequence", seq), list(copies), state)

    # --- cache control -------------------------------------------------------
    def ensure_capacity(self, n: int) -> None:
        """Raises ContextOverflowError unless a sequence of n positions fits."""
        n = _index("capacity", n)
        with self._lock:
            self._core.ensure_capacity(n)

    def rewind(self, length: int, seq: int = 0) -> None:
        """Keeps the first `length` positions of sequence `seq` and forgets the rest.

        On a recurrent trunk the state must reach `length`: a row of the sequence's last
        verify, or where it is. A forward settles every sequence's verify at its length
        first, so roll a sequence back before forwarding the others."""
        length = _index("rewind length", length)
        with self._lock:
            self._touch(seq)
            self._core.rewind(length, _index("sequence", seq))

    def reset_sequence(self, seq: int) -> None:
        """Empties one sequence of the cache, and the drafters' region of it."""
        with self._lock:
            self._touch(seq)
            self._core.reset_seq(_index("sequence", seq))

    def set_recurrent_rollback(self, path: str) -> None:
        """Switches a recurrent trunk's rollback path (see load()) between generations."""
        with self._lock:
            self._core.set_recurrent_rollback(path)

    def snapshot_recurrent(self, seq: int = 0) -> None:
        """Before a verify on the "reforward" path: keeps sequence seq's recurrent state on
        the host. A no-op elsewhere (a verify keeps the state after each of its rows)."""
        with self._lock:
            self._core.snapshot_recurrent(_index("sequence", seq))

    def restore_recurrent(self, seq: int = 0) -> None:
        """The "reforward" path's rollback: the state before the verify again (then rewind
        to where it was and re-forward the kept rows). A no-op elsewhere."""
        with self._lock:
            self._core.restore_recurrent(_index("sequence", seq))

    def reset(self) -> None:
        """Empties every sequence."""
        with self._lock:
            self._touch(*range(len(self._stamps)))
            self._core.reset()

    def __repr__(self) -> str:
        return (f"Target({self.path!r}, arch={self.arch}, n_layer={self.n_layer}, n_embd={self.n_embd}, "
                f"n_vocab={self.n_vocab}, n_ctx={self.max_context_length}, device={self.device})")


def architectures() -> list[str]:
    """The general.architecture values ggspec runs, as a target or as a draft model."""
    return list(_core.architectures())


def _row_kernels(choice: bool | str) -> str:
    if isinstance(choice, bool):
        return "auto" if choice else "off"
    if not isinstance(choice, str):
        raise TypeError(f"row_kernels must be a bool or one of auto, vnni, vnni-block, avx2, off; got {choice!r}")
    return choice  # checked by the core, which knows what this CPU runs


def _endpoints(rpc: str | Sequence[str] | None) -> list[str]:
    if rpc is None:
        return []
    items = rpc.split(",") if isinstance(rpc, str) else list(rpc)
    endpoints = [str(e).strip() for e in items]
    if not all(endpoints):
        raise ValueError(f"rpc lists an empty worker: {rpc!r}")
    return endpoints


def load(
    path: str | os.PathLike,
    *,
    n_ctx: int = 4096,
    n_threads: int | None = None,
    device: str = "auto",
    kv_type: str = "f16",
    prefill_chunk: int = 512,
    max_verify_rows: int = 65,
    graph_budget_mb: float | None = None,
    row_kernels: bool | str = "auto",
    recurrent_rollback: str = "snapshots",
    recurrent_snapshot_mb: float = 512.0,
    rpc: str | Sequence[str] | None = None,
    tensor_split: Sequence[float] | None = None,
    rpc_timeout_s: float = 0.0,
    mmap: bool = True,
) -> Target:
    """Loads a GGUF model as a speculative-decoding target.

    n_ctx: positions the KV cache holds. n_threads: CPU threads (default: physical
    cores). device: "auto" (a GPU if this build has one, else the CPU), "cpu", or a
    ggml device name such as "CUDA0". kv_type: "f16", "bf16" or "f32".
    prefill_chunk: rows per prefill graph. max_verify_rows: the largest verify
    (draft window + 1) a sliding-window cache must be able to rewind.
    graph_budget_mb: memory for persistent graphs; the least recently used are freed past it
    (None: about the weights' size, between 256 MiB and 1 GiB).
    row_kernels: on the CPU, run multi-row weight products (verify rows, prefill chunks) on
    ggspec's own kernels where a probe finds them bit-identical to ggml's: "auto" (the best
    path this CPU runs), "vnni" (AVX512-VNNI), "avx2" or "off" (ggml_mul_mat everywhere, for
    comparison); True and False mean "auto" and "off". "vnni-block" (never chosen by "auto")
    takes Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K and Q6_K weights in ggspec's
    block order: on AVX512-VNNI its verifies of 8+ rows and its prefill run faster, and
    speculation stays exact, but its logits are not llama.cpp's bits (greedy text can part
    from llama.cpp's).
    `target.row_kernels` says which was chosen.
    recurrent_rollback: how a recurrent trunk (qwen35) rolls back a partly accepted verify:
    "snapshots" (the default: the verify keeps the state after each row and the kept one is
    copied on the device), "snapshots-host" (the same copy through the host) or "reforward"
    (restore the pre-verify state and re-forward the kept rows).
    recurrent_snapshot_mb: the memory a verify's per-row recurrent states may take; it
    bounds a recurrent trunk's verify rows (max_verify_rows), hence the draft window.
    rpc: ggml RPC workers ("host:port", a list or comma-separated; `ggspec rpc-server` runs
    one) to split the trunk's layers over: runs of layers on each worker in order, the rest
    on this host's CPU, with the embedding, LM head and drafters local. Each is probed
    first (ValueError naming one that does not answer). tensor_split: the layer shares, one
    per worker then one for this host (default: by free memory). rpc_timeout_s: a worker
    that does not answer for this long ends the process with a line naming it (0: wait).
    `target.placement` says where each layer runs.
    mmap: on the CPU, read the weights through the file's memory map (the default, as
    llama.cpp does: pages load as they are first read, and processes share them). False
    copies them into private memory that Linux backs with transparent huge pages, which
    spares the CPU a page walk per 4 KB of weights read: one-row steps ran 12-18% faster
    on a Zen 4 VM (SmolLM2-135M, Gemma 3 270M), for the weights' size in private memory.
    The outputs are the same bits either way.

    Raises ModelFormatError for a corrupt, truncated or unsupported file.
    """
    path = os.fspath(path)
    if not isinstance(mmap, bool):
        raise TypeError(f"mmap must be True or False, got {mmap!r}")
    threads = physical_cores() if n_threads is None else _index("n_threads", n_threads)
    if threads < 1:
        raise ValueError(f"n_threads must be at least 1, got {threads}")
    allowed = usable_cpus()
    if threads > allowed:
        warnings.warn(f"n_threads {threads} is more than the {allowed} CPUs this process may use; using {allowed}",
                      stacklevel=2)
        threads = allowed
    core = _core.Target(path, n_ctx=_index("n_ctx", n_ctx), n_threads=threads, device=device, kv_type=kv_type,
                        prefill_chunk=_index("prefill_chunk", prefill_chunk),
                        max_verify_rows=_index("max_verify_rows", max_verify_rows),
                        graph_budget_mb=0.0 if graph_budget_mb is None else float(graph_budget_mb),
                        row_kernels=_row_kernels(row_kernels),
                        recurrent_rollback=recurrent_rollback,
                        recurrent_snapshot_mb=float(recurrent_snapshot_mb), rpc=_endpoints(rpc),
                        tensor_split=[float(x) for x in tensor_split or []], rpc_timeout_s=float(rpc_timeout_s),
                        mmap=mmap)
    return Target(core, path, kv_type, mmap)


__all__ = ["Target", "BatchItem", "architectures", "ForwardResult", "load", "ModelFormatError", "ContextOverflowError",
           "physical_cores", "token_array", "usable_cpus"]
