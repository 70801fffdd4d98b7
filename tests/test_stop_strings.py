"""Stop strings over streamed text: however the text is cut into pieces, what goes
out is the text before the first stop string, and a piece goes out as soon as
no stop string can begin in it."""

from hypothesis import given, strategies as st

from ggspec.text.stop_strings import StopStrings

ALPHABET = "ab\n"


def run(stops, pieces):
    matcher = StopStrings(stops)
    out, seen = [], ""
    for piece in pieces:
        out.append(matcher.push(piece))
        seen += piece
        if matcher.matched is None:  # nothing lost, and a tail held only while it may begin a stop string
            assert "".join(out) + matcher._held == seen
            assert not matcher._held or any(s.startswith(matcher._held) and s != matcher._held for s in stops)
    if matcher.matched is None:
        out.append(matcher.flush())
    return "".join(out), matcher, out


def first_cut(text, stops):
    hits = [i for s in stops if (i := text.find(s)) >= 0]
    return text[:min(hits)] if hits else text


@given(st.lists(st.text(ALPHABET, max_size=6), max_size=12),
       st.lists(st.text(ALPHABET, min_size=1, max_size=4), min_size=1, max_size=3))
def test_out_is_the_text_before_the_first_stop_string_however_it_is_cut(pieces, stops):
    text = "".join(pieces)
    out, matcher, _ = run(stops, pieces)
    assert out == first_cut(text, stops)
    assert (matcher.matched is not None) == any(s in text for s in stops)


def test_a_stop_string_split_over_pieces_is_held_then_dropped():
    _, matcher, out = run(["</s>"], ["Hello <", "/", "s> more"])
    assert out == ["Hello ", "", ""] and matcher.matched == "</s>"


def test_a_held_tail_that_does_not_complete_goes_out():
    _, matcher, out = run(["STOP"], ["a ST", "ar", " b"])
    assert out == ["a ", "STar", " b", ""] and matcher.matched is None
    _, _, out = run(["STOP"], ["end ST"])
    assert out == ["end ", "ST"]  # flushed at the end


def test_no_stop_strings_pass_everything_at_once():
    assert run([], ["a", "b"])[2] == ["a", "b", ""]


def test_a_longer_stop_string_that_began_first_wins_over_a_shorter_one_inside_it():
    # "a\n\n" began at 0, before "\n" completed at 1: the text waits, and the first wins
    assert run(["\n", "a\n\n"], ["a\n", "\n"])[0] == ""
    # it fails to complete: the shorter one, already in the held tail, stops the text
    out, matcher, _ = run(["\n", "a\n\n"], ["a\n", "b"])
    assert out == "a" and matcher.matched == "\n"
    # the generation ends while the longer one may still complete: the shorter one stops it
    out, matcher, _ = run(["\n", "a\n\n"], ["a\n"])
    assert out == "a" and matcher.matched == "\n"
