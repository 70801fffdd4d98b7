"""The pinned llama.cpp peer: where its build lives, and reference logits/tokens from it.

Logits and tokens come from the sdist's ctypes bindings (`llama_cpp.llama_cpp`)
loaded against the peer's libllama.so. They run in a child process (this file's
`__main__`) so that a llama.cpp abort cannot take the caller (pytest) down.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

FLAVORS = ("usual", "wheel", "rpc")  # rpc: wheel + ggml's RPC backend, for bench.rpc
BUILD_SCRIPT = Path(__file__).with_name("build_peer.sh")
WORKER_TIMEOUT_S = 600


def peer_root() -> Path:
    return Path(os.environ.get("GGSPEC_PEER_DIR", Path.home() / ".cache/ggspec/peer"))


def peer_dir(flavor: str = "wheel") -> Path:
    if flavor not in FLAVORS:
        raise ValueError(f"unknown peer flavor {flavor!r}; expected one of {FLAVORS}")
    return peer_root() / flavor


def lib_dir(flavor: str = "wheel") -> Path:
    """Directory holding libllama.so and the tools (llama.cpp puts both in build/bin)."""
    return peer_dir(flavor) / "build" / "bin"


def bindings_dir() -> Path:
    """The sdist's `llama_cpp` Python package, copied into the cache by build_peer.sh."""
    return peer_root() / "python" / "llama_cpp"


def is_built(flavor: str = "wheel") -> bool:
    return (peer_dir(flavor) / "stamp").is_file() and (lib_dir(flavor) / "libllama.so").is_file()


def _require_built(flavor: str, path: Path) -> Path:
    if not (is_built(flavor) and path.exists()):
        raise FileNotFoundError(
            f"llama.cpp peer ({flavor} flavor) not built: {path} missing; "
            f"run `{BUILD_SCRIPT} {flavor}` or bench.peer.peer.ensure_built({flavor!r})"
        )
    return path


def tool(name: str, flavor: str = "wheel") -> Path:
    return _require_built(flavor, lib_dir(flavor) / name)


def ensure_built(flavor: str = "wheel") -> Path:
    """Build the flavor if needed (minutes on 2 cores); returns its directory."""
    if not is_built(flavor):
        subprocess.run(["bash", str(BUILD_SCRIPT), flavor], check=True)
    return peer_dir(flavor)


def peer_logits(
    model_path: str | os.PathLike,
    tokens: list[int],
    n_threads: int = 2,
    n_ctx: int = 512,
    flavor: str = "wheel",
    one_by_one: bool = False,
) -> np.ndarray:
    """Logits for every position of `tokens`: float32 [len(tokens), n_vocab].

    One llama_decode over the whole input, or with one_by_one a decode per token,
    as llama.cpp generates (its batched CPU kernels are not batch-invariant for
    K-quants, so the two differ there).

    Flash attention off, weight repacking off, fixed threads and context size, so the
    reference does not move with llama.cpp's auto-tuning.
    """
    if not 0 < len(tokens) <= n_ctx:
        raise ValueError(f"need 1..n_ctx={n_ctx} tokens, got {len(tokens)}")
    request = {
        "op": "logits",
        "model": str(model_path),
        "tokens": [int(t) for t in tokens],
        "n_threads": n_threads,
        "n_ctx": n_ctx,
        "one_by_one": one_by_one,
    }
    return _run_worker(request, flavor, ".npy", np.load)


def peer_tokenize(
    model_path: str | os.PathLike,
    text: str,
    add_special: bool = True,
    parse_special: bool = True,
    flavor: str = "wheel",
) -> list[int]:
    """llama_tokenize(vocab, text, add_special, parse_special) of the peer."""
    request = {
        "op": "tokenize",
        "model": str(model_path),
        "text": text,
        "add_special": add_special,
        "parse_special": parse_special,
    }
    return _run_worker(request, flavor, ".json", lambda p: json.loads(Path(p).read_text()))


def peer_greedy(
    model_path: str | os.PathLike,
    prompts: list[list[int]],
    n: int,
    n_threads: int = 2,
    n_ctx: int = 512,
    flavor: str = "wheel",
    prompt_ubatch: int | None = None,
) -> list[tuple[list[int], list[float]]]:
    """llama.cpp's greedy continuation of each prompt, generated as its tools do
    (the prompt in one decode, then a decode per token): per prompt, the n ids and,
    at each step, how far its top-1 logit leads its top-2.

    prompt_ubatch: llama.cpp's n_ubatch for the prompt (its -ub); None = the whole
    prompt in one ubatch. 1 keeps llama.cpp on its one-row kernels throughout: its
    batched K-quant kernels are not batch-invariant, so the prompt's KV differs
    slightly between the two.
    """
    request = {
        "op": "greedy",
        "model": str(model_path),
        "prompts": [[int(t) for t in p] for p in prompts],
        "n": n,
        "n_threads": n_threads,
        "n_ctx": n_ctx,
        "prompt_ubatch": prompt_ubatch,
    }
    runs = _run_worker(request, flavor, ".json", lambda p: json.loads(Path(p).read_text()))
    return [(run["ids"], run["margins"]) for run in runs]


def peer_tokenize_many(
    model_path: str | os.PathLike,
    texts: list[str],
    add_special: bool = True,
    parse_special: bool = True,
    flavor: str = "wheel",
) -> list[list[int]]:
    """peer_tokenize for many texts in one child process (one model load)."""
    request = {
        "op": "tokenize_many",
        "model": str(model_path),
        "texts": list(texts),
        "add_special": add_special,
        "parse_special": parse_special,
    }
    return _run_worker(request, flavor, ".json", lambda p: json.loads(Path(p).read_text()))


def peer_vocab_info(model_path: str | os.PathLike, flavor: str = "wheel") -> dict:
    """The peer's view of the vocabulary: special ids, add_bos/add_eos, end-of-generation ids,
    every token's attribute bits, and every token's piece (llama_token_to_piece) as hex, with
    special=False ("pieces") and special=True ("special_pieces")."""
    request = {"op": "vocab_info", "model": str(model_path)}
    return _run_worker(request, flavor, ".json", lambda p: json.loads(Path(p).read_text()))


def _run_worker(request: dict, flavor: str, suffix: str, load):
    _require_built(flavor, lib_dir(flavor) / "libllama.so")
    _require_built(flavor, bindings_dir() / "llama_cpp.py")
    with tempfile.TemporaryDirectory(prefix="ggspec-peer-") as tmp:
        request_path = Path(tmp) / "request.json"
        result_path = Path(tmp) / f"result{suffix}"
        request_path.write_text(json.dumps({**request, "flavor": flavor}))
        proc = subprocess.run(
            [sys.executable, __file__, str(request_path), str(result_path)],
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT_S,
        )
        if proc.returncode != 0 or not result_path.is_file():
            raise RuntimeError(
                f"peer worker ({request['op']}) failed with rc={proc.returncode}:\n"
                f"{proc.stderr[-4000:]}"
            )
        return load(result_path)


# ---- child process side -------------------------------------------------------------


def _import_bindings(flavor: str):
    # llama_cpp.py resolves the library as $LLAMA_CPP_LIB_PATH/libllama.so (a directory,
    # not a file). Its libggml*.so siblings are found through the build RUNPATH.
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir(flavor))
    # The package __init__ also imports the high-level API (needs diskcache, jinja2);
    # a bare package object lets us import just the ctypes layer.
    package = types.ModuleType("llama_cpp")
    package.__path__ = [str(bindings_dir())]
    sys.modules["llama_cpp"] = package
    return importlib.import_module("llama_cpp.llama_cpp")


def _load_model(ll, path: str, vocab_only: bool):
    params = ll.llama_model_default_params()
    params.n_gpu_layers = 0
    params.use_extra_bufts = False  # no weight repacking: plain ggml CPU kernels
    params.vocab_only = vocab_only
    model = ll.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    return model


def _new_context(ll, model, req: dict, n_batch: int, n_ubatch: int | None = None):
    params = ll.llama_context_default_params()
    params.n_ctx = req["n_ctx"]
    params.n_batch = n_batch
    params.n_ubatch = n_ubatch or n_batch  # default: one ubatch per decode
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = req["n_threads"]
    params.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.no_perf = True
    ctx = ll.llama_init_from_model(model, params)
    if not ctx:
        raise RuntimeError("llama_init_from_model failed")
    return ctx


def _decode(ll, ctx, batch, tokens: list[int], start: int, all_rows: bool) -> None:
    """One llama_decode of `tokens` at positions start.., logits for every row or the last."""
    for j, token in enumerate(tokens):
        batch.token[j] = token
        batch.pos[j] = start + j
        batch.n_seq_id[j] = 1
        batch.seq_id[j][0] = 0
        batch.logits[j] = int(all_rows or j == len(tokens) - 1)
    batch.n_tokens = len(tokens)
    rc = ll.llama_decode(ctx, batch)
    if rc != 0:
        raise RuntimeError(f"llama_decode returned {rc}")


def _compute_logits(ll, req: dict) -> np.ndarray:
    model = _load_model(ll, req["model"], vocab_only=False)
    tokens = req["tokens"]
    n = len(tokens)
    ctx = _new_context(ll, model, req, 1 if req.get("one_by_one") else n)
    n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model))
    spans = [(i, i + 1) for i in range(n)] if req.get("one_by_one") else [(0, n)]
    rows = []
    batch = ll.llama_batch_init(n, 0, 1)
    for begin, end in spans:
        _decode(ll, ctx, batch, tokens[begin:end], begin, all_rows=True)
        rows += [np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, j), shape=(n_vocab,)).copy()
                 for j in range(end - begin)]
    logits = np.stack(rows).astype(np.float32)
    ll.llama_batch_free(batch)
    ll.llama_free(ctx)
    ll.llama_model_free(model)
    return logits


def _greedy(ll, req: dict) -> list[dict]:
    model = _load_model(ll, req["model"], vocab_only=False)
    n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model))
    runs = []
    for prompt in req["prompts"]:
        ctx = _new_context(ll, model, req, len(prompt), req.get("prompt_ubatch"))
        batch = ll.llama_batch_init(len(prompt), 0, 1)
        ids, margins, feed, pos = [], [], prompt, 0
        for _ in range(req["n"]):
            _decode(ll, ctx, batch, feed, pos, all_rows=False)
            pos += len(feed)
            logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            best = int(np.argmax(logits))
            top2 = np.partition(logits, -2)[-2:]
            ids.append(best)
            margins.append(float(top2[1] - top2[0]))
            feed = [best]
        runs.append({"ids": ids, "margins": margins})
        ll.llama_batch_free(batch)
        ll.llama_free(ctx)
    ll.llama_model_free(model)
    return runs


def _tokenize(ll, req: dict) -> list[int]:
    model = _load_model(ll, req["model"], vocab_only=True)
    vocab = ll.llama_model_get_vocab(model)
    ids = _tokenize_one(ll, vocab, req["text"], req["add_special"], req["parse_special"])
    ll.llama_model_free(model)
    return ids


def _tokenize_many(ll, req: dict) -> list[list[int]]:
    model = _load_model(ll, req["model"], vocab_only=True)
    vocab = ll.llama_model_get_vocab(model)
    out = [_tokenize_one(ll, vocab, t, req["add_special"], req["parse_special"]) for t in req["texts"]]
    ll.llama_model_free(model)
    return out


def _tokenize_one(ll, vocab, text: str, add_special: bool, parse_special: bool) -> list[int]:
    data = text.encode("utf-8")
    capacity = len(data) + 8
    while True:
        buf = (ll.llama_token * capacity)()
        n = ll.llama_tokenize(vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n >= 0:
            return list(buf[:n])
        capacity = -n  # a negative count is the size the output needs


def _vocab_info(ll, req: dict) -> dict:
    model = _load_model(ll, req["model"], vocab_only=True)
    vocab = ll.llama_model_get_vocab(model)
    n = ll.llama_vocab_n_tokens(vocab)
    buf = ctypes.create_string_buffer(1024)

    def piece(token: int, special: bool) -> str:
        size = ll.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
        if size < 0:  # never for real vocabularies: 1 KiB holds any token
            raise RuntimeError(f"token {token}: piece longer than {len(buf)} bytes")
        return buf.raw[:size].hex()

    info = {
        "n_vocab": n,
        "bos": ll.llama_vocab_bos(vocab),
        "eos": ll.llama_vocab_eos(vocab),
        "eot": ll.llama_vocab_eot(vocab),
        "add_bos": bool(ll.llama_vocab_get_add_bos(vocab)),
        "add_eos": bool(ll.llama_vocab_get_add_eos(vocab)),
        "eog_ids": [t for t in range(n) if ll.llama_vocab_is_eog(vocab, t)],
        "attrs": [int(ll.llama_vocab_get_attr(vocab, t)) for t in range(n)],
        "pieces": [piece(t, False) for t in range(n)],
        "special_pieces": [piece(t, True) for t in range(n)],
    }
    ll.llama_model_free(model)
    return info


def _worker_main(request_path: str, result_path: str) -> None:
    req = json.loads(Path(request_path).read_text())
    ll = _import_bindings(req["flavor"])
    ll.llama_backend_init()
    if req["op"] == "logits":
        np.save(result_path, _compute_logits(ll, req))
    elif req["op"] == "greedy":
        Path(result_path).write_text(json.dumps(_greedy(ll, req)))
    elif req["op"] == "tokenize":
        Path(result_path).write_text(json.dumps(_tokenize(ll, req)))
    elif req["op"] == "tokenize_many":
        Path(result_path).write_text(json.dumps(_tokenize_many(ll, req)))
    elif req["op"] == "vocab_info":
        Path(result_path).write_text(json.dumps(_vocab_info(ll, req)))
    else:
        raise ValueError(f"unknown op {req['op']!r}")
    ll.llama_backend_free()


if __name__ == "__main__":
    _worker_main(*sys.argv[1:])
