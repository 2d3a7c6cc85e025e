"""The server's stdin framing (`codespec/framing.py`): frames in any chunking, resynchronisation after
bad headers, and agreement with the fuzz driver's independent model of the same rules."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from codespec import framing
from codespec.framing import MAX_HEADER_LINE, FrameParser, read_strict_frames
from codespec.reliability.fuzz import CaseGenerator, FramingModel


def frame(message: dict) -> bytes:
    return framing.frame(json.dumps(message).encode())


def feed_in_chunks(data: bytes, cuts: list[int]) -> tuple[list[bytes], FrameParser]:
    parser, bodies, start = FrameParser(), [], 0
    for cut in sorted(c % (len(data) + 1) for c in cuts) + [len(data)]:
        bodies += parser.feed(data[start:cut])
        start = max(start, cut)
    return bodies, parser


MESSAGES = [{"jsonrpc": "2.0", "id": i, "method": "codespec/stats", "params": {"text": "é😀\r\n" * i}}
            for i in range(5)]


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_well_formed_frames_come_out_whole_however_the_bytes_are_split(cuts):
    stream = b"".join(frame(m) for m in MESSAGES)
    bodies, parser = feed_in_chunks(stream, cuts)
    assert [json.loads(b) for b in bodies] == MESSAGES
    assert parser.idle and parser.resyncs == 0


def test_a_length_too_short_leaves_junk_that_the_next_header_skips():
    good = frame(MESSAGES[1])
    body = json.dumps(MESSAGES[2]).encode()
    bodies = FrameParser().feed(b"Content-Length: %d\r\n\r\n" % (len(body) - 5) + body + good)
    assert bodies == [body[:-5], good.split(b"\r\n\r\n", 1)[1]]


def test_a_length_too_long_is_abandoned_when_the_next_header_arrives():
    parser = FrameParser()
    assert parser.feed(b"Content-Length: 300000000\r\n\r\n{\"jsonrpc\"") == []
    assert not parser.idle
    good = frame(MESSAGES[3])
    bodies = parser.feed(good[:7]) + parser.feed(good[7:])  # the header split across two reads
    assert [json.loads(b) for b in bodies] == [MESSAGES[3]] and parser.resyncs == 1 and parser.idle


def test_lenient_headers_and_ignored_ones():
    body = json.dumps(MESSAGES[0]).encode()
    parser = FrameParser()
    for header in (b"content-length:%d\n" % len(body), b"CONTENT-LENGTH: %d \r\n" % len(body),
                   b"Content-Type: x\r\nContent-Length: %d\r\n" % len(body),
                   b"Content-Length: 1\r\nContent-Length: %d\r\n" % len(body)):
        assert parser.feed(header + b"\r\n" + body) == [body], header
    for bad in (b"Content-Length: -3\r\n", b"Content-Length: 0x10\r\n", b"Content-Length: \xd9\xa3\r\n",
                b"Content-Length: 99999999999\r\n"):
        assert parser.feed(bad + b"\r\n" + body) == [], bad  # no length: the blank line starts nothing
        assert parser.feed(b"\r\n") == [] and parser.idle


def test_a_header_line_without_end_is_bounded_and_its_tail_still_counts():
    body = json.dumps(MESSAGES[0]).encode()
    parser = FrameParser()
    parser.feed(b"x" * (MAX_HEADER_LINE + 10))
    assert len(parser.buffer) < 1024
    assert parser.feed(b"Content-Length: %d\r\n\r\n" % len(body) + body) == [body]


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**31), st.lists(st.integers(min_value=0, max_value=1 << 22), max_size=12))
def test_the_parser_and_the_fuzz_model_agree_on_fuzz_streams(seed, cuts):
    cases = [case.data for case in CaseGenerator(seed).cases(40)]
    stream = b"".join(cases)
    model = FramingModel()
    expected = [body for case in cases for body in model.feed(case)]
    bodies, parser = feed_in_chunks(stream, cuts)
    assert bodies == expected
    assert parser.idle == model.clean


def test_the_strict_reader_names_every_departure_from_the_framing():
    good = frame(MESSAGES[1])
    assert good == b"Content-Length: %d\r\n\r\n" % len(json.dumps(MESSAGES[1])) + json.dumps(MESSAGES[1]).encode()
    stream = io.BytesIO(b"stray\n" + good + b"X-Other: 1\r\n\r\n" + good + b"Content-Length: 99\r\n\r\n{}")
    violations: list[str] = []
    assert [json.loads(b) for b in read_strict_frames(stream, violations)] == [MESSAGES[1], MESSAGES[1]]
    assert [v.split(":")[0] for v in violations] == ["stray bytes on stdout", "frame without a valid Content-Length",
                                                    "truncated frame on stdout"]
