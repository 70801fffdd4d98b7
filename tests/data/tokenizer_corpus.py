"""Strings on which ggspec's tokenizer must give llama.cpp's token ids.

Hand-picked cases by theme, plus deterministic generated ones (fixed seeds) that
mix the character classes tokenizers treat differently. CORPUS is the full list.
"""

from __future__ import annotations

import random

ENGLISH = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I can't believe it's not butter.",
    "We're here, they've gone, you'll see, she'd know, I'm sure.",
    "DON'T SHOUT, I'M LISTENING. IT'S FINE. WE'LL SEE. THEY'VE GONE. HE'D KNOW. YOU'RE RIGHT.",
    "It’s a curly apostrophe — and an em dash – and an en dash.",
    "'s 't 're 've 'm 'll 'd",
    "rock 'n' roll, ''quoted'', '''triple'''",
    "O'Neil's dog's bone",
    "camelCaseIdentifier snake_case_name SCREAMING_SNAKE kebab-case-name",
    "Mr. Smith went to Washington D.C. on Jan. 5th.",
    "e.g. i.e. etc. vs. a.m. p.m.",
    "What?! Really?!? No... way!!!",
    "(parentheses) [brackets] {braces} <angles>",
    "https://example.com/path/to/page?query=1&other=two#fragment",
    "mailto:someone@example.org, @mention #hashtag $5.00 100% 3^2",
    "/usr/local/bin/python3 C:\\Windows\\System32\\drivers\\etc\\hosts",
    "A",
    "a",
    "I",
    "Hello",
    " Hello",
    "  Hello",
    "Hello ",
    "Hello  ",
]

UNICODE = [
    "你好，世界！今天天气很好。",
    "汉字和漢字，简体与繁體。",
    "日本語のテキストです。カタカナとひらがな。",
    "東京都渋谷区　ｶﾀｶﾅ　ｈａｌｆ／ｆｕｌｌ　ｗｉｄｔｈ",
    "한국어 텍스트입니다. 안녕하세요!",
    "مرحبا بالعالم! هذا نص عربي.",
    "العَرَبِيَّة مع التشكيل",
    "नमस्ते दुनिया! यह हिंदी पाठ है।",
    "क्षत्रिय ज्ञान श्री",
    "Привет, мир! Это русский текст.",
    "Україна, Їжак, ґанок; Беларусь: ў",
    "Γειά σου Κόσμε! Ελληνικά κείμενα.",
    "שלום עולם! זהו טקסט בעברית.",
    "สวัสดีชาวโลก ภาษาไทย",
    "Tiếng Việt có dấu: Được, Người, Những",
    "e\u0301 vs \u00e9, n\u0303 vs \u00f1, a\u0308 vs \u00e4",
    "Z\u0351\u036b\u0343a\u0308\u0352l\u0357g\u0310o\u0346 t\u0351e\u0304x\u0316t",
    "Ａ　ｆｕｌｌ－ｗｉｄｔｈ　ｌｉｎｅ．",
    "Ελληνικά ἀρχαῖα: ὁ λόγος",
    "Ärger über Öl; Straße; ÆØÅ æøå; Ğğ İı Şş",
    "ﬁ ﬂ ﬀ ligatures; ™ © ® ° ± × ÷",
    "∀x∈ℝ: x²≥0; ∑ᵢ aᵢ ≤ ∞; √2 ≈ 1.414",
    "Mixed: English 中文 العربية हिन्दी Русский 日本語 한국어",
    "\u200bzero\u200bwidth\u200bspaces\u200b",
    "\ufeffbyte order mark",
    "soft\u00adhyphen and non\u2011breaking",
    "\ue000\uf8ff private use",
    "\u0378\u0379 unassigned",
    "\U0010fffd\U0010ffff plane 16",
    "\ufffd replacement \ufffe\uffff nonchars",
    "\x00\x01\x07\x1b[31mred\x1b[0m\x7f",
    "\u2581 lower one eighth block \u2581\u2581",
    "Ġ Ċ ĉ byte-level look-alikes",
    "<0x0A> <0xFF> <0x41>",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉",
    "ℌ℮ℓℓ𝑜 ⅫⅣ ①②③ ⑴⑵",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "import numpy as np\n\nx = np.arange(10)\nprint(x[::2].sum())\n",
    "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, *args, **kwargs):\n"
    "        super().__init__(*args, **kwargs)\n        self._x: int = 0  # comment\n",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tcontinue\n\tprint(f\"{i=}\")\n",
    "lambda x: x**2 if x>=0 else -x; a//=3; b<<=1; c!=d",
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, %s!\\n\", \"world\");\n    return 0;\n}\n",
    "for (int i = 0; i < n; ++i) { a[i] = b[i] * c[i]; } // loop",
    "std::vector<std::pair<int, float>> v; auto it = v.begin(); ptr->field; x ? y : z;",
    '{"name": "ggspec", "version": "0.1.0", "tags": ["a", "b"], "n": 42, "ok": true, "none": null}',
    '{\n  "nested": {\n    "list": [1, 2.5, -3e10],\n    "s": "esc\\"aped\\n"\n  }\n}',
    "<!DOCTYPE html>\n<html>\n<head><title>Test</title></head>\n<body>\n"
    "  <div class=\"x\" id='y'>Hi &amp; bye &lt;3</div>\n</body>\n</html>",
    "<br/><img src=\"a.png\" alt=\"\"/><p>para</p><!-- comment -->",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | wc -l; done\n",
    "git commit -m 'fix: handle \\r\\n' && git push origin main --force-with-lease",
    "^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@[a-z]+\\.[a-z]{2,}$",
    "# Title\n\n## Subtitle\n\n- item 1\n- item 2\n\n```python\nprint('x')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
    "fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "const f = async (x) => { await fetch(`/api/${x}`); }; // JS",
    "    indented four\n        indented eight\n\t\ttabbed\n",
    "x = 1\r\ny = 2\r\nz = x + y\r\n",
    "if (a && b || !c) { return; } else if (d) { throw new Error(\"e\"); }",
    "$ pip install --no-deps . -q\n>>> import ggspec\n>>> ggspec.__version__\n'0.1.0'",
]

WHITESPACE = [
    "",
    " ",
    "  ",
    "   ",
    "    ",
    "\t",
    "\t\t",
    "\n",
    "\n\n",
    "\n\n\n",
    "\r\n",
    "\r\n\r\n",
    "\r",
    " \n ",
    "\n \n",
    " \t \n \r\n ",
    "   leading spaces",
    "trailing spaces   ",
    "\tleading tab",
    "trailing tab\t",
    "\nleading newline",
    "trailing newline\n",
    "multiple   spaces   between   words",
    "tabs\tbetween\twords",
    "mixed \t \t whitespace",
    "line one\nline two\nline three",
    "line one\r\nline two\r\nline three\r\n",
    "para one\n\npara two\n\n\npara three",
    "\u00a0non-breaking\u00a0space",
    "ideographic\u3000space",
    "thin\u2009space and em\u2003space",
    "line\u2028separator\u2029paragraph",
    "\x0bvertical tab\x0cform feed",
    "\u0085next line",
    " " * 40,
    "\n" * 40,
    "\t" * 12,
    " \n" * 10,
    "word" + " " * 17 + "word",
    "a\n\n\n\n\n\n\n\n\n\n\n\nb",
]

NUMBERS = [
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345",
    "1234567890",
    "12345678901234567890123456789012345678901234567890",
    "3.14159265358979",
    "-0.001",
    "+1.5e-10",
    "6.022e23",
    "1,000,000",
    "1.000.000,50",
    "2024-01-15",
    "15/01/2024",
    "12:34:56.789",
    "2024-01-15T12:34:56Z",
    "+1 (555) 123-4567",
    "v1.2.3-rc.4",
    "0xDEADBEEF 0b1010 0o777",
    "100% 50¢ £30 €40 ¥50 ₹60",
    "1st 2nd 3rd 4th 11th 21st",
    "٠١٢٣٤٥٦٧٨٩ Arabic-Indic",
    "१२३ Devanagari digits",
    "１２３４５ full-width",
    "x² y³ H₂O ½ ¾ ⅓",
    "Ⅰ Ⅱ Ⅲ Ⅳ roman",
    "pi=3.14, e=2.718, phi=1.618",
    "In 1999, 2000 and 2001 there were 12 345 people.",
]

EMOJI = [
    "😀",
    "😀😃😄😁",
    "Hello 👋 world 🌍!",
    "👍🏻 👍🏼 👍🏽 👍🏾 👍🏿",
    "👨‍👩‍👧‍👦 family",
    "👩🏽‍💻 technologist",
    "🏳️‍🌈 🏴‍☠️",
    "🇺🇸 🇬🇧 🇯🇵 🇩🇪 🇫🇷",
    "1️⃣ 2️⃣ #️⃣ *️⃣",
    "❤️ ❤ ♥️ ☺️",
    "🦜🦩🪿🫎",
    "emoji in text 🤔 with words 🎉 between",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland tag sequence",
    "🧑‍🤝‍🧑🫱🏻‍🫲🏿",
]

# Characters new in Unicode 16.0: Hugging Face's regex engine knows them, llama.cpp's
# tables (an older Unicode) treat them as unassigned.
UNICODE_16 = [
    "\u1c89\u1c8a Cyrillic TJE, a\u1c8ab x\u1c89y",
    "Latin \ua7cb\ua7cc\ua7dc mid\ua7cbword",
    "Garay \U00010d4a\U00010d4b\U00010d4c digits \U00010d40\U00010d41\U00010d42 mixed a\U00010d40b1\U00010d45",
    "Balinese \u1b4e\u1b4f \u1b7f punct a\u1b4e.b",
    "Kirat Rai \U00016d40\U00016d41 \U00016d70\U00016d71",
    "Todhri \U000105c0\U000105c1x\U000105c2",
    "Unicode 16 emoji \U0001fae9 \U0001fac6 \U0001fabe",
]

SPECIAL_TEXT = [
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>",
    "<|im_start|>",
    "<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<bos>",
    "<eos>",
    "<pad>",
    "<unk>",
    "<mask>",
    "<s> </s>",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|>",
    "text<|endoftext|>more text",
    "<unused0> <unused99>",
    "<start_of_image>[multimodal]<end_of_image>",
    "<reponame>ggspec<file_sep>main.py<filename>x<gh_stars>10",
    "<|im_",
    "<|im_start",
    "im_start|>",
    "<start_of",
    "_of_turn>",
    "<<bos>>",
    "<bos><bos>",
    " <bos> ",
    "a<bos>b",
    "<eos>\n",
    "\n<start_of_turn>",
    "<start_of_turn> user",
    "<end_of_turn><start_of_turn>",
    "<|im_end|>\n<|im_start|>",
    "<|im_start|>  spaced  <|im_end|>",
    "<b>bold</b> <i>it</i> <bos>",
    "<start_of_turn><|im_start|><bos><|endoftext|>",
    "<|eot_id|> <|start_header_id|>",
    "[INST] hi [/INST]",
    "<think>reasoning</think>answer",
]

REPEATS = (
    [c * n for c in "-=.*#_~" for n in (2, 3, 4, 5, 7, 8, 16, 33)]
    + ["ab" * n for n in (3, 8)]
    + ["a" * n for n in (1, 2, 3, 10, 64)]
    + ["!?" * 5, "?!" * 3 + "...", "—" * 6, "…" * 4]
)

LONG = [
    (
        "Speculative decoding speeds up autoregressive generation by letting a small draft model "
        "propose several tokens that the large target model then verifies in a single forward pass. "
        "When the proposals are accepted, the output is identical to what the target would have "
        "produced on its own, token for token.\n\n"
    )
    * 6,
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco "
    "laboris nisi ut aliquip ex ea commodo consequat. Duis aute irure dolor in reprehenderit in "
    "voluptate velit esse cillum dolore eu fugiat nulla pariatur. Excepteur sint occaecat cupidatat "
    "non proident, sunt in culpa qui officia deserunt mollit anim id est laborum.",
    "\n".join(f"{i:4d}: item {i} costs ${i * 1.25:.2f} — status {'ok' if i % 3 else 'FAIL'}" for i in range(60)),
    "".join(chr(0x4E00 + (i * 37) % 2000) for i in range(400)),
]

# Building blocks for generated strings: each class is treated differently by some pre-tokenizer.
_PIECES = [
    "a", "Z", "word", " the", "The", "ing", "'s", "'LL", "'", "\"", ",", ".", "!", "?", "-", "_", "/", "\\",
    "(", ")", "<", ">", "|", "{", "}", "$", "+", "^", "~", "`", "@", "#", "%", "&", "*", "=", ";", ":",
    "0", "7", "12", "345", "6789", "٣", "²", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0",
    "\u3000", "é", "e\u0301", "ß", "Ω", "ж", "中", "文字", "カ", "한", "ع", "न", "\u094d", "ๆ", "😀", "👍🏽",
    "👨\u200d👩\u200d👧", "🇯🇵", "\u200d", "\ufe0f", "\u2581", "Ġ", "<0x41>", "<bos>", "<eos>",
    "<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "_turn>",
    "<reponame>", "<unused5>", "\U0001f9ea", "\x00", "\x7f",
]


def _generated(seed: int, count: int, min_pieces: int, max_pieces: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(min_pieces, max_pieces))) for _ in range(count)]


def _chars(seed: int, count: int) -> list[str]:
    # Random code points from blocks with different categories (letters, marks, numbers,
    # punctuation, symbols, spaces), to probe character classes one by one.
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0x97F),
              (0x2000, 0x206F), (0x20A0, 0x22FF), (0x2460, 0x27BF), (0x3000, 0x30FF), (0x4E00, 0x4FFF),
              (0xAC00, 0xACFF), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F), (0x1D400, 0x1D7FF)]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        lo, hi = rng.choice(ranges)
        length = rng.randint(1, 24)
        out.append("".join(chr(rng.randint(lo, hi)) if rng.random() < 0.8 else " " for _ in range(length)))
    return out


GENERATED = _generated(20260101, 60, 1, 12) + _generated(7, 15, 20, 60) + _chars(99, 40)

# Duplicates across themes are dropped, keeping the first.
CORPUS: list[str] = list(
    dict.fromkeys(ENGLISH + UNICODE + UNICODE_16 + CODE + WHITESPACE + NUMBERS + EMOJI + SPECIAL_TEXT + REPEATS + LONG + GENERATED)
)
