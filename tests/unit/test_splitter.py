"""The one NDJSON line splitter (issue 19, item 5): lines out equal lines in, whatever the reads,
and every line over the cap is reported exactly once, wherever it falls within a read."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.errors import FramingError
from acp_bridge.rpc.splitter import TOO_LONG, LineSplitter, TooLong

Item = bytes | TooLong


def feed_all(splitter: LineSplitter, reads: list[bytes]) -> list[Item]:
    """Every read fed in turn, then EOF; the bound is checked after each read."""
    out: list[Item] = []
    for data in reads:
        out += splitter.feed(data)
        assert splitter.pending_bytes <= splitter.max_line_bytes
    last = splitter.end()
    if last is not None:
        out.append(last)
    assert splitter.pending_bytes == 0
    return out


def expected(lines: list[bytes], cap: int) -> list[Item]:
    return [TOO_LONG if len(line) > cap else line for line in lines]


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut into reads at ``points`` (taken modulo its length; empty reads dropped)."""
    edges = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


# -- examples -------------------------------------------------------------------------------------


def test_lines_come_out_whole_without_their_newline_however_the_bytes_arrive() -> None:
    splitter = LineSplitter(100)
    assert splitter.feed(b'{"a":') == []
    assert splitter.feed(b'1}\n{"b"') == [b'{"a":1}']
    assert splitter.feed(b":2}\n\n") == [b'{"b":2}', b""]
    assert splitter.feed(b"x\ny\nz") == [b"x", b"y"]
    assert splitter.end() == b"z"


def test_a_carriage_return_stays_part_of_its_line_and_counts_towards_the_cap() -> None:
    splitter = LineSplitter(3)
    assert splitter.feed(b"abc\r\nab\r\n") == [TOO_LONG, b"ab\r"]


def test_a_line_of_exactly_the_cap_passes_and_one_byte_more_does_not() -> None:
    for reads in ([b"aaaa\nbbbbb\nc\n"], [b"aa", b"aa\nbbb", b"bb\n", b"c\n"]):
        assert feed_all(LineSplitter(4), reads) == [b"aaaa", TOO_LONG, b"c"]


def test_a_whole_over_long_line_inside_one_read_is_reported_in_its_place() -> None:
    """The surviving mutant of issue 19: one read holding a complete over-long line between
    other lines. Its size must be checked although it never waits in the buffer."""
    splitter = LineSplitter(10)
    read = b"first\n" + b"x" * 11 + b"\nthird\nfourth\nrest"
    assert splitter.feed(read) == [b"first", TOO_LONG, b"third", b"fourth"]
    assert splitter.end() == b"rest"


def test_an_unfinished_line_is_reported_as_soon_as_it_passes_the_cap_and_only_once() -> None:
    splitter = LineSplitter(10)
    assert splitter.feed(b"ok\n" + b"y" * 8) == [b"ok"]
    assert splitter.feed(b"yyy") == [TOO_LONG]  # 11 bytes, no newline yet
    assert splitter.pending_bytes == 0  # its bytes are dropped as they arrive
    assert splitter.feed(b"y" * 1000) == []
    assert splitter.feed(b"yy\nnext\n") == [b"next"]


def test_a_last_line_without_a_newline_comes_from_end_unless_it_was_too_long() -> None:
    splitter = LineSplitter(5)
    assert splitter.feed(b"a\nbbbbbb") == [b"a", TOO_LONG]
    assert splitter.end() is None
    assert splitter.feed(b"") == []
    assert splitter.end() is None  # nothing pending: no empty last line
    assert splitter.feed(b"cc") == []
    assert splitter.end() == b"cc"


def test_keep_whole_hands_out_an_accepted_run_of_whole_lines_as_one_item() -> None:
    seen: list[bytes] = []

    def only_updates(run: bytes) -> bool:
        seen.append(run)
        return all(line.startswith(b"u") for line in run.split(b"\n"))

    splitter = LineSplitter(100, keep_whole=only_updates)
    splitter.feed(b"u0")
    # The first line completes what was pending, the last one waits: only the run between.
    assert splitter.feed(b"\nu1\nu2\nu3\nu4") == [b"u0", b"u1\nu2\nu3"]
    assert splitter.feed(b"\nu5\nr6\nu7\n") == [b"u4", b"u5", b"r6", b"u7"]
    assert seen == [b"u1\nu2\nu3", b"u5\nr6\nu7"]


def test_keep_whole_never_takes_a_run_that_holds_an_over_long_line() -> None:
    splitter = LineSplitter(4, keep_whole=lambda run: True)
    assert splitter.feed(b"a\nb\nccccc\nd\ne\n") == [b"a", b"b", TOO_LONG, b"d", b"e"]


def test_feed_until_too_long_gives_the_lines_before_the_first_over_long_one() -> None:
    splitter = LineSplitter(4)
    assert splitter.feed_until_too_long(b"a\nb\n") == ([b"a", b"b"], False)
    assert splitter.feed_until_too_long(b"c\nddddd\ne\n") == ([b"c"], True)
    error = splitter.too_long_error()
    assert isinstance(error, FramingError) and error.fatal
    assert "4-byte cap" in str(error)


def test_the_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LineSplitter(0)


# -- properties -----------------------------------------------------------------------------------

CAP = 16

short_lines = st.lists(st.binary(max_size=CAP).map(lambda b: b.replace(b"\n", b"")), max_size=12)
long_line = st.integers(min_value=CAP + 1, max_value=4 * CAP).map(lambda n: b"L" * n)
any_lines = st.lists(st.one_of(st.binary(max_size=CAP), long_line), max_size=20).map(
    lambda lines: [line.replace(b"\n", b"") for line in lines]
)
cut_points = st.lists(st.integers(min_value=0), max_size=25)


def unrun(items: list[Item]) -> list[Item]:
    """Runs handed out whole (``keep_whole``) split back into their lines."""
    return [
        piece for item in items for piece in ([item] if item is TOO_LONG else item.split(b"\n"))
    ]


@pytest.mark.parametrize("keep_whole", [None, True, False], ids=["plain", "runs", "no-runs"])
@given(lines=any_lines, tail=st.binary(max_size=2 * CAP), points=cut_points)
def test_any_reads_of_any_lines_give_the_lines_back_with_each_over_long_one_reported_once(
    keep_whole: bool | None, lines: list[bytes], tail: bytes, points: list[int]
) -> None:
    tail = tail.replace(b"\n", b"")  # a last line that ends at EOF without a newline
    data = b"".join(line + b"\n" for line in lines) + tail
    want = expected([*lines, tail] if tail else lines, CAP)
    splitter = LineSplitter(
        CAP, keep_whole=None if keep_whole is None else (lambda run: keep_whole)
    )
    got = feed_all(splitter, cut(data, points))
    assert (got if keep_whole is None else unrun(got)) == want
    assert got.count(TOO_LONG) == sum(len(line) > CAP for line in [*lines, tail])


@pytest.mark.parametrize("place", ["first", "middle", "last", "last, unfinished"])
@given(
    before=short_lines,
    long=long_line,
    read_before=short_lines.filter(bool),
    read_after=short_lines.filter(bool),
    after=short_lines,
    points_before=cut_points,
    points_after=cut_points,
    cut_into_long=st.integers(min_value=1),
)
def test_an_over_long_line_is_reported_once_wherever_it_falls_within_one_read(
    place: str,
    before: list[bytes],
    long: bytes,
    read_before: list[bytes],
    read_after: list[bytes],
    after: list[bytes],
    points_before: list[int],
    points_after: list[int],
    cut_into_long: int,
) -> None:
    """One read holds the over-long line first (it starts the read), in the middle (lines on
    both sides), last (the read ends with its newline), or last and unfinished (the read ends
    inside it, its newline comes in a later read). The reads around it are cut anyhow."""
    if place == "first":
        read_before = []
    if place.startswith("last"):
        read_after = []
    inside = [*read_before, long, *read_after]
    read = b"".join(line + b"\n" for line in inside)
    following = b"".join(line + b"\n" for line in after)
    if place == "last, unfinished":  # the read stops inside the line; the rest comes later
        split = len(read) - 1 - (cut_into_long % len(long))
        read, following = read[:split], read[split:] + following
    reads = [
        *cut(b"".join(line + b"\n" for line in before), points_before),
        read,
        *cut(following, points_after),
    ]
    lines = [*before, *inside, *after]
    got = feed_all(LineSplitter(CAP), reads)
    assert got == expected(lines, CAP)
    assert got.count(TOO_LONG) == 1
