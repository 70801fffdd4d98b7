"""The `ggspec` command line: `ggspec generate -p "..."`, `ggspec serve`, `ggspec info MODEL`,
`ggspec rpc-server` (a worker a split target's layers run on).

Bad input (a missing model, a file that is not GGUF, --chat without a template,
a prompt longer than the context, a bad flag) prints one line and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from ggspec.engine.sampling import SamplerConfig
from ggspec.environment import target_options_from
from ggspec.speculators.options import add_spec_arguments, spec_options_from

_DEFAULTS = SamplerConfig()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive(kind):
    def parse(text):
        value = kind(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
        return value
    return parse


def _seed(text):
    value = int(text, 0)
    if not 0 <= value <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"must be in [0, 4294967295], got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ggspec", description="Speculative decoding for GGUF language models.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = commands.add_parser("generate", help="generate text from a prompt",
                            description="Generate text; it streams to stdout and a stats line goes to stderr.")
    g.add_argument("-m", "--model", metavar="PATH",
                   help="GGUF model (default: the embedded Gemma 3 270M)")
    source = g.add_mutually_exclusive_group()
    source.add_argument("-p", "--prompt", metavar="TEXT", help="the prompt")
    source.add_argument("-f", "--file", metavar="FILE", help="read the prompt from FILE ('-' for stdin)")
    g.add_argument("--chat", action="store_true",
                   help="format the prompt as a user message with the model's chat template")
    g.add_argument("--enable-thinking", choices=["on", "off"],
                   help="pass enable_thinking to the chat template (default: the template's own)")
    g.add_argument("-n", "--n-predict", type=_positive(int), default=128, metavar="N",
                   help="tokens to generate at most (default 128)")
    g.add_argument("--temp", type=float, default=_DEFAULTS.temperature,
                   help=f"temperature; <= 0 is greedy (default {_DEFAULTS.temperature})")
    g.add_argument("--top-k", type=int, default=_DEFAULTS.top_k,
                   help=f"top-k; <= 0 is off (default {_DEFAULTS.top_k})")
    g.add_argument("--top-p", type=float, default=_DEFAULTS.top_p, help=f"top-p; 1 is off (default {_DEFAULTS.top_p})")
    g.add_argument("--min-p", type=float, default=_DEFAULTS.min_p, help=f"min-p; 0 is off (default {_DEFAULTS.min_p})")
    g.add_argument("--seed", type=_seed, help="sampling seed (default: random, reported in the stats)")
    g.add_argument("-t", "--threads", type=_positive(int), help="CPU threads (default: physical cores)")
    g.add_argument("-c", "--ctx", type=_positive(int), default=4096, metavar="N",
                   help="context size in tokens (default 4096)")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-generation tokens")
    g.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="stop when the text produces TEXT, which is not printed (repeatable)")
    g.add_argument("--json", action="store_true",
                   help="print one JSON object (text, tokens, prompt_tokens, stats) instead of streaming")
    _add_placement_arguments(g)
    add_spec_arguments(g)
    _add_serve_parser(commands)
    _add_rpc_server_parser(commands)
    i = commands.add_parser("info", help="what a GGUF file is and what ggspec can do with it",
                            description="Architecture, layers, context, tokenizer, quantization mix, drafters, "
                                        "the --spec-type values that can serve it, and what ggspec refuses in it.")
    i.add_argument("model", metavar="MODEL", help="a GGUF file")
    i.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _add_serve_parser(commands) -> None:
    s = commands.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                            description="An OpenAI-compatible server (/v1/chat/completions, /v1/completions, "
                                        "/v1/models, /health, /metrics, /slots) on the engine's slots. "
                                        "Needs the server extra: pip install \".[server]\".")
    s.add_argument("-m", "--model", metavar="PATH", help="GGUF model (default: the embedded Gemma 3 270M)")
    s.add_argument("-a", "--alias", metavar="NAME", help="the model id /v1/models lists (default: the file name)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    s.add_argument("--slots", type=_positive(int), default=1, metavar="N",
                   help="requests decoded at once, their rows in one forward per step (default 1)")
    s.add_argument("-c", "--ctx", type=_positive(int), default=4096, metavar="N",
                   help="context of EACH slot, in tokens (default 4096; llama-server's -c is shared by its slots)")
    s.add_argument("-t", "--threads", type=_positive(int), help="CPU threads (default: physical cores)")
    s.add_argument("--max-queue", type=_positive(int), default=64, metavar="N",
                   help="requests that may wait for a slot; more get a 503 with Retry-After (default 64)")
    s.add_argument("--api-key", metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (or 'X-Api-Key: KEY') on every endpoint but /health "
                        "and the chat page's files")
    _add_placement_arguments(s)
    add_spec_arguments(s)


def _add_placement_arguments(p) -> None:
    p.add_argument("--no-mmap", action="store_true",
                   help="copy the weights into memory (huge pages on Linux: faster steps) instead of mapping the file")
    p.add_argument("--rpc", metavar="HOST:PORT[,...]",
                   help="split the model's layers over these ggml RPC workers (`ggspec rpc-server`), in order, "
                        "the rest on this host; drafters stay here")
    p.add_argument("--tensor-split", metavar="A,B,...",
                   help="layer shares: one per --rpc worker, then this host's (default: by free memory)")
    p.add_argument("--rpc-timeout", type=float, default=0.0, metavar="SECONDS",
                   help="end with an error when a worker does not answer for this long (default 0: wait)")


def _placement_options(args) -> dict:
    memory = {"mmap": False} if args.no_mmap else {}
    if args.rpc is None:
        if args.tensor_split is not None:
            raise ValueError("--tensor-split needs --rpc")
        return memory
    try:
        shares = None if args.tensor_split is None else [float(x) for x in args.tensor_split.split(",")]
    except ValueError:
        raise ValueError(f"--tensor-split must be numbers separated by commas, got {args.tensor_split!r}") from None
    if not 0 <= args.rpc_timeout < float("inf"):
        raise ValueError(f"--rpc-timeout must be a number of seconds >= 0, got {args.rpc_timeout}")
    return {**memory, "rpc": args.rpc, "tensor_split": shares, "rpc_timeout_s": args.rpc_timeout, "device": "cpu"}


def _add_rpc_server_parser(commands) -> None:
    r = commands.add_parser("rpc-server", help="serve this host's CPU to ggspec clients as a ggml RPC worker",
                            description="A ggml RPC worker: clients run with --rpc HOST:PORT place layers on it. "
                                        "The protocol has NO authentication: anyone who reaches the port can run "
                                        "code-like graphs and read this process's memory. Keep it on 127.0.0.1 or a "
                                        "trusted network. SIGTERM or SIGINT stop it at once.")
    r.add_argument("-H", "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    r.add_argument("-p", "--port", type=int, default=50052, help="port (default 50052)")
    r.add_argument("-t", "--threads", type=_positive(int), help="CPU threads (default: physical cores)")
    r.add_argument("--cache", metavar="DIR",
                   help="keep large tensors clients send here, by hash: a client that comes back sends only hashes")
    r.add_argument("--no-kernels", action="store_true",
                   help="run clients' weight products on ggml's own ops, as a plain ggml worker does, rather than "
                        "on ggspec's kernels (the same bits, slower verify rows)")


def _rpc_server(args) -> None:
    from ggspec.native.rpc import serve
    from ggspec.native.target import physical_cores

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"ggspec rpc-server: warning: listening on {args.host}: the RPC protocol has no authentication; "
              "anyone who reaches this port can use this machine", file=sys.stderr)
    serve(args.host, args.port, args.threads or physical_cores(), args.cache, kernels=not args.no_kernels)


def _read_prompt(args) -> str:
    if args.prompt is not None:
        return args.prompt
    if args.file is None:
        raise ValueError("no prompt: give -p TEXT or -f FILE")
    try:
        if args.file == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        with open(args.file, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        name = "standard input" if args.file == "-" else args.file
        raise ValueError(f"the prompt file {name} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _generate(args) -> None:
    from ggspec.generation import stream
    from ggspec.model import Model

    spec = spec_options_from(args)  # before loading: a bad flag or variable fails fast
    prompt = _read_prompt(args)
    # one request: nothing later could reuse its prefix
    model = Model(args.model, n_ctx=args.ctx, n_threads=args.threads, prefix_cache_mb=None,
                  **target_options_from(), **_placement_options(args))
    run = stream(model, prompt, max_tokens=args.n_predict, temperature=args.temp, top_k=args.top_k,
                 top_p=args.top_p, min_p=args.min_p, seed=args.seed, chat=args.chat,
                 enable_thinking=None if args.enable_thinking is None else args.enable_thinking == "on",
                 ignore_eos=args.ignore_eos, stop=args.stop, spec=spec)
    try:
        _print(run, args.json, model.load_seconds)
    except KeyboardInterrupt:
        run.cancel()  # the engine's worker stops within a step; wait for it before exiting
        run.result
        raise


def _serve(args) -> None:
    spec = spec_options_from(args)
    try:
        from ggspec.server.main import serve
        from ggspec.server.service import ServerConfig
    except ImportError as e:
        raise ValueError(f"ggspec serve needs the server extra (pip install \".[server]\"): {e}") from None
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    if args.api_key is not None and not args.api_key:
        raise ValueError("--api-key must not be empty")
    config = ServerConfig(model_path=args.model, alias=args.alias, slots=args.slots, n_ctx=args.ctx,
                          n_threads=args.threads, spec=spec, max_queue=args.max_queue, api_key=args.api_key,
                          target_options={**target_options_from(), **_placement_options(args)})
    serve(config, host=args.host, port=args.port)


def _print(run, as_json: bool, load_seconds: float) -> None:
    if as_json:
        r = run.result
        json.dump({"text": r.text, "tokens": r.tokens, "prompt_tokens": r.prompt_tokens,
                   "load_ms": 1000.0 * load_seconds, "stats": r.stats}, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    for piece in run:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    print(_stats_line(run.result.stats, load_seconds), file=sys.stderr)


def _info(args) -> None:
    from ggspec.info import format_info, model_info

    info = model_info(args.model)
    print(json.dumps(info, ensure_ascii=False) if args.json else format_info(info))


def _stats_line(s: dict, load_seconds: float) -> str:
    line = f"ggspec: loaded in {load_seconds:.2f} s"
    if s["setup_ms"] > 0:
        line += f", speculation set up in {s['setup_ms'] / 1000:.2f} s (drafter, step costs)"
    line += (f"\nggspec: prompt {s['prompt_tokens']} tokens at {s['prompt_tokens_per_second']:.1f} tok/s, "
            f"generated {s['gen_tokens']} at {s['gen_tokens_per_second']:.1f} tok/s, "
            f"stop: {s['stop']}, seed {s['seed']}")
    if s["rpc_round_trips"]:
        line += (f"\nggspec: rpc: {s['rpc_round_trips']} round trips to the workers "
                 f"({s['rpc_round_trips_per_token']:.1f} per token), {s['rpc_bytes'] / 1e6:.2f} MB")
    if s["decline_reason"]:
        line += f"\nggspec: speculation declined ({s['decline_reason']}); decoding plain"
    elif s["spec_type"] != "none":
        line += (f"\nggspec: spec {s['spec_type']}: {s['draft_n_accepted']}/{s['draft_n']} drafts accepted, "
                 f"{s['mean_acceptance_length']:.2f} tokens per verify over {s['verify_steps']} verifies, "
                 f"{s['plain_steps']} plain steps (governor parked {s['governor_parked_steps']}, "
                 f"probes {s['governor_probes']})")
    return line


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.formatwarning = lambda message, *_, **__: f"ggspec: warning: {message}\n"
    try:
        if args.command == "generate":
            _generate(args)
        elif args.command == "serve":
            _serve(args)
        elif args.command == "info":
            _info(args)
        elif args.command == "rpc-server":
            _rpc_server(args)
    except (ValueError, OSError) as e:  # the library's errors on bad input: one line, no traceback
        message = " ".join(str(e).split())
        print(f"ggspec: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nggspec: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
