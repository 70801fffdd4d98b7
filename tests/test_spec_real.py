"""On the real models, speculation changes nothing but speed: the same tokens with
it on and off, greedy and seeded-sampled, 256 tokens on each prompt of the
benchmark suites (bench/suites: prose, lists, documents, code edits, prose that
turns to copying)."""

import pytest

import ggspec
from bench.spec_prompts import PROMPTS

pytestmark = pytest.mark.slow

N_TOKENS = 256
SAMPLED = dict(temperature=0.8, top_p=0.95, top_k=40, min_p=0.05, seed=20261129)


def prompts_for(model: ggspec.Model) -> list[tuple[str, bool]]:
    """(prompt, chat): the chat form where the model has a template."""
    chat = model.has_chat_template
    return [(p.chat if chat else p.raw, chat) for p in PROMPTS]


@pytest.fixture(scope="module", params=["gemma3_path", "smollm2_path"])
def model(request):
    return ggspec.Model(request.getfixturevalue(request.param), n_ctx=2048, n_threads=2)


@pytest.mark.parametrize("sampling", [dict(temperature=0), SAMPLED], ids=["greedy", "sampled"])
def test_speculation_on_and_off_emit_the_same_tokens(model, sampling):
    cases = prompts_for(model)
    assert len(cases) >= 10
    accepted = 0
    for prompt, chat in cases:
        plain = ggspec.generate(model, prompt, chat=chat, max_tokens=N_TOKENS, ignore_eos=True, spec=False,
                                **sampling)
        spec = ggspec.generate(model, prompt, chat=chat, max_tokens=N_TOKENS, ignore_eos=True, spec="ngram",
                               **sampling)
        assert spec.tokens == plain.tokens, prompt[:60]
        assert spec.text == plain.text
        accepted += spec.stats["draft_n_accepted"]
    assert accepted > 0  # the n-gram drafter did take part
