"""Greedy text generation agrees with llama.cpp's on the same GGUF (the second oracle).

A run may part from llama.cpp only where llama.cpp's own top-1 leads its top-2 by
less than MARGIN (a near tie that float rounding may break either way).
Run with -s to see how far each run agrees.
"""

import pytest

import ggspec
from bench.peer.peer import peer_greedy, peer_tokenize

pytestmark = [pytest.mark.peer, pytest.mark.slow]

MARGIN = 0.05
N_TOKENS = 64
SMOLLM2_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
PROMPTS = [
    "The old stonemasons who built the cathedral",
    "Here is a short recipe for tomato soup:\n1.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Q: Why is the sky blue?\nA:",
    "Once upon a time, in a village at the edge of a great forest, there lived",
]


@pytest.mark.parametrize("model_fixture,chat", [("gemma3_path", False), ("smollm2_path", False),
                                                ("smollm2_path", True)])
def test_greedy_generation_matches_llama_cpp(request, model_fixture, chat):
    path = request.getfixturevalue(model_fixture)
    model = ggspec.Model(path, n_ctx=512, n_threads=2)
    prompts = []
    for text in PROMPTS:
        if chat:
            # SmolLM2's template adds its default system message (llama.cpp's built-in
            # chatml would not; its --jinja mode, like ggspec, runs the file's template).
            rendered = model.chat_text(text)
            assert rendered == SMOLLM2_SYSTEM + f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
            ids = model.encode_chat(text)
            assert ids == peer_tokenize(path, rendered, add_special=True, parse_special=True)
        else:
            ids = model.encode_prompt(text)
            assert ids == peer_tokenize(path, text, add_special=True, parse_special=True)
        prompts.append(ids)
    # llama.cpp with -ub 1 stays on its one-row kernels, which ggspec's every row
    # equals bit for bit; its default (the prompt in one ubatch) runs batched
    # K-quant kernels that are not batch-invariant, and is reported beside it.
    runs = {ub: peer_greedy(path, prompts, N_TOKENS, n_ctx=512, n_threads=2, prompt_ubatch=ub) for ub in (1, None)}
    agreed = {1: [], None: []}
    for i, text in enumerate(PROMPTS):
        ours = ggspec.generate(model, text, chat=chat, max_tokens=N_TOKENS, temperature=0, ignore_eos=True).tokens
        for ub, theirs in runs.items():
            their_ids, margins = theirs[i]
            n = next((j for j, (a, b) in enumerate(zip(ours, their_ids)) if a != b), N_TOKENS)
            agreed[ub].append(n)
            if ub == 1 and n < N_TOKENS:
                assert margins[n] < MARGIN, (f"{text!r}: parted from llama.cpp at token {n} where its top-1 "
                                             f"leads by {margins[n]:.3f} >= {MARGIN}")
    print(f"{path} chat={chat}: tokens agreeing with llama.cpp per prompt (of {N_TOKENS}): "
          f"-ub 1 {agreed[1]}, default batched prompt {agreed[None]}")
