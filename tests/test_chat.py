"""Chat templates render as transformers' apply_chat_template renders them."""

import pytest

from ggspec.text.chat import ChatTemplateError, render_chat

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
HI = [{"role": "user", "content": "Hi"}]


def test_chatml_with_and_without_the_generation_prompt():
    assert render_chat(CHATML, HI) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert render_chat(CHATML, HI, add_generation_prompt=False) == "<|im_start|>user\nHi<|im_end|>\n"


def test_block_whitespace_is_trimmed_like_transformers():
    # trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one
    template = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert render_chat(template, HI + HI) == "[Hi]\n[Hi]\n"


def test_special_tokens_and_thinking_flag_reach_the_template():
    template = "{{ bos_token }}{% if enable_thinking is defined %}{{ enable_thinking }}{% else %}unset{% endif %}"
    assert render_chat(template, HI, bos_token="<s>") == "<s>unset"
    assert render_chat(template, HI, bos_token="<s>", enable_thinking=False) == "<s>False"


def test_tojson_keeps_text_as_is_and_loop_controls_work():
    template = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m | tojson }}{% endfor %}"
    out = render_chat(template, [{"role": "user", "content": "héllo <b>"}, {"role": "user", "content": "x"}])
    assert out == '{"role": "user", "content": "héllo <b>"}'


def test_raise_exception_becomes_a_clear_error():
    template = "{{ raise_exception('Conversation roles must alternate') }}"
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        render_chat(template, HI)


def test_a_model_without_a_template_is_refused_clearly():
    with pytest.raises(ChatTemplateError, match="no chat template"):
        render_chat(None, HI)


def test_templates_cannot_reach_python_internals():
    with pytest.raises(ChatTemplateError):
        render_chat("{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}", HI)
