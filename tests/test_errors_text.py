"""What messages say about values: the one clipper of each kind, "first k and N
more", and the replica device ID format."""

from __future__ import annotations

from genericdp.errors import clip, cut, cut_middle, ellipsized, first_of, shown
from genericdp.replicaids import replica_id, split_replica_id


def test_shown_and_clip_quote_at_most_the_limit() -> None:
    """A long or unprintable value is quoted, cut, with its length; a short one is as is."""
    assert clip("ttyUSB0") == "ttyUSB0"
    assert clip("a\nb") == "'a\\nb'"
    assert shown("x" * 10, 4) == "'xxxx'... (10 characters)"


def test_cut_says_how_much_is_left_out() -> None:
    """Past the limit, the start and the number of characters left out."""
    assert cut("abc", 3) == "abc"
    assert cut("abcdef", 3) == "abc... (3 more characters)"


def test_ellipsized_fits_the_limit_mark_included() -> None:
    """The result is never longer than the limit, the mark counted."""
    assert ellipsized("abcd", 4) == "abcd"
    assert ellipsized("abcde", 4) == "abc…"
    assert ellipsized("abcdefgh", 6, "...") == "abc..."


def test_cut_middle_keeps_both_ends() -> None:
    """A long message keeps its start and its end (which often says what to do)."""
    assert cut_middle("short", 10) == "short"
    assert cut_middle("0123456789abcdef", 8) == "0123 …[8 characters]… cdef"


def test_first_of_lists_a_few_and_counts_the_rest() -> None:
    """At most ``limit`` items, then how many more; ``empty`` for none."""
    assert first_of(["a", "b"], 3) == "a, b"
    assert first_of(["a", "b", "c", "d", "e"], 3) == "a, b, c and 2 more"
    assert first_of([], 3, empty="none") == "none"
    assert first_of(["long", "x"], 1, show=str.upper) == "LONG and 1 more"


def test_a_replica_id_splits_back_into_unit_and_index() -> None:
    """``<unit>::<i>`` gives back its unit and index; an unshared unit's ID has no index."""
    assert replica_id("ttyUSB0", 3) == "ttyUSB0::3"
    assert split_replica_id("ttyUSB0::3") == ("ttyUSB0", "::", "3")
    assert split_replica_id("ttyUSB0") == ("ttyUSB0", "", "")
