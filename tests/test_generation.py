"""A request's per-token hook sees each token as the runtime emits it."""

import ggspec
from ggspec.engine.planner import plan_speculation
from ggspec.speculators.options import SpecOptions


def test_on_token_sees_every_emitted_token_in_order(tiny_model):
    model = ggspec.Model(tiny_model("llama", "q8_0"), n_ctx=256, n_threads=2)
    prompt = model.encode_prompt("a b c a b c a b")
    for speculate in (False, True):
        seen: list[int] = []
        plan = plan_speculation(model.target, SpecOptions(enabled=speculate, spec_type="ngram"))
        with ggspec.Engine(model) as engine:
            result = engine.submit(prompt, max_tokens=40, temperature=0, ignore_eos=True, spec=plan,
                                   on_token=seen.append).result
        assert seen == result.tokens and len(seen) == 40
