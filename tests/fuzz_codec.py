"""Long-running, seeded mutation fuzzer of the KRPC codec (every codec, every version).

    PYTHONPATH=src python tests/fuzz_codec.py --seconds 600 [--seed N] [--last-input FILE]
    PYTHONPATH=src python tests/fuzz_codec.py --replay TARGET HEX

Each iteration builds (or reuses) a random valid message of a random (message, version),
encodes it as a body, a request frame or a response frame, applies 1..4 random mutations
(bit flips, 0xff/0x80/0x7f/0x00 runs, inserted/overwritten lying lengths and over-long
varints, deletions, truncation, splices) or replaces it by random bytes, and decodes it.
The properties checked (see check()) are the codec's "bad input" rules: the only exception
a decoder may raise is a ProtocolError subclass (a DecodeError names .field and an .offset
inside the buffer), no single decode takes long (or, every ~500th input, measured with
tracemalloc, allocates more than a small multiple of the input), and whatever decodes
re-encodes without error and is a fixpoint (encode(decode(encode(m))) == encode(m)).

The run is deterministic for a given --seed (only the stop time depends on the clock), so a
hard crash is reproduced by re-running with the printed seed; --last-input FILE keeps the
input being decoded in FILE (a memory-mapped write per iteration) so that the input that
killed the process can be read back (first 4 bytes: big-endian length; then the target,
a newline, and the bytes). Tests import the builder and mutator from this module
(tests/test_bad_input.py).
"""
from __future__ import annotations

import argparse
import mmap
import os
import random
import struct
import sys
import time
import tracemalloc

try:
    import groupcoord.protocol as P
except ImportError:  # run as a script without PYTHONPATH=src
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import groupcoord.protocol as P

from groupcoord.codegen.schema import INT_RANGES, ZERO_UUID, load_all

SCHEMA_DIR = os.path.join(os.path.dirname(P.__file__), "schemas")
SPECS = load_all(SCHEMA_DIR)
CASES = [(s.name, v) for s in sorted(SPECS.values(), key=lambda s: s.name) for v in s.versions]

SLOW_DECODE_SECONDS = 0.5    # a single decode slower than this counts as a failure


class FuzzFailure(AssertionError):
    """A property of the codec's bad-input rules does not hold for one input."""


# ------------------------------------------------------------------ random valid messages

_TEXT_ALPHABET = "abcXYZ019-_.:/ \u00e9\u00df\u4e2d\U0001f600"


def _rand_text(rng: random.Random) -> str:
    n = rng.choice((0, 0, 1, 3, 8, rng.randint(0, 200)))
    return "".join(rng.choice(_TEXT_ALPHABET) for _ in range(n))


def _rand_bytes(rng: random.Random) -> bytes:
    n = rng.choice((0, 1, 4, 16, rng.randint(0, 300)))
    return rng.randbytes(n)


def _rand_int(rng: random.Random, t: str) -> int:
    lo, hi = INT_RANGES[t]
    r = rng.random()
    if r < 0.3:
        return rng.choice((lo, hi, 0, 1, -1 if lo < 0 else 2))
    if r < 0.6:
        return rng.randint(max(lo, -1000), min(hi, 1000))
    return rng.randint(lo, hi)


def _rand_scalar(rng: random.Random, t: str):
    if t in INT_RANGES:
        return _rand_int(rng, t)
    if t == "bool":
        return rng.random() < 0.5
    if t == "float64":
        return rng.choice((0.0, -1.5, 1e300, rng.uniform(-1e6, 1e6)))
    if t == "string":
        return _rand_text(rng)
    if t in ("bytes", "records"):
        return _rand_bytes(rng)
    if t == "uuid":
        return rng.choice((ZERO_UUID, rng.randbytes(16)))
    raise AssertionError(t)


def _default(f):
    d = f.default_value()
    if f.is_array:
        return [] if d is not None else None
    if d == "STRUCT":
        return getattr(P.messages, f.struct.py_class)()
    return d


def _rand_field(rng: random.Random, f, v: int, depth: int):
    if f.nullable(v) and rng.random() < 0.15:
        return None
    if f.is_array:
        n = rng.choice((0, 1, 2, 3, 5)) if depth < 2 else rng.choice((0, 1))
        if f.is_struct:
            return [random_struct(rng, f.struct.py_class, f.struct.fields, v, depth + 1)
                    for _ in range(n)]
        return [_rand_scalar(rng, f.elem_type) for _ in range(n)]
    if f.is_struct:
        return random_struct(rng, f.struct.py_class, f.struct.fields, v, depth + 1)
    return _rand_scalar(rng, f.type)


def random_struct(rng: random.Random, cls_name: str, fields, v: int, depth: int = 0):
    cls = getattr(P.messages, cls_name)
    kw = {}
    for f in fields:
        kw[f.py_name] = _rand_field(rng, f, v, depth) if f.present(v) else _default(f)
    return cls(**kw)


def random_message(rng: random.Random, name: str, v: int):
    """A random message valid at version v (fields v lacks keep their defaults)."""
    return random_struct(rng, name, SPECS[name].fields, v)


# ------------------------------------------------------------------ targets

def encode_for(target: str, msg, v: int, rng: random.Random | None = None) -> bytes:
    """Valid bytes of msg for a target: body:<Name>:<v> | request-frame |
    response-frame:<api_key>:<v>. Frames are returned without their 4-byte size prefix."""
    if target.startswith("body:"):
        return P.encode(msg, v)
    if target == "request-frame":
        client = rng.choice((None, "", "client-1", "\u00e9t\u00e9")) if rng else "client-1"
        corr = rng.randint(-(1 << 31), (1 << 31) - 1) if rng else 7
        return P.encode_request_frame(msg, v, corr, client)[4:]
    if target.startswith("response-frame:"):
        corr = rng.randint(-(1 << 31), (1 << 31) - 1) if rng else 7
        return P.encode_response_frame(msg, v, corr)[4:]
    raise ValueError("unknown target %r" % target)


def target_of(name: str, v: int, frame: bool) -> str:
    spec = SPECS[name]
    if not frame or spec.type == "data":
        return "body:%s:%d" % (name, v)
    if spec.type == "request":
        return "request-frame"
    return "response-frame:%d:%d" % (spec.api_key, v)


def _decode(target: str, data):
    """Returns (message, re-encode function, decode function for re-encoded bytes)."""
    if target.startswith("body:"):
        _, name, v = target.split(":")
        cls, v = getattr(P.messages, name), int(v)
        return P.decode(cls, data, v), (lambda m: P.encode(m, v)), (lambda b: P.decode(cls, b, v))
    if target == "request-frame":
        header, body = P.decode_request_frame(data)
        assert isinstance(header, P.RequestHeader)

        def enc(m):
            return P.encode_request_frame(m, header.api_version, header.correlation_id,
                                          header.client_id)[4:]
        return body, enc, (lambda b: P.decode_request_frame(b)[1])
    if target.startswith("response-frame:"):
        _, key, v = target.split(":")
        key, v = int(key), int(v)
        corr, body = P.decode_response_frame(data, key, v)

        def enc(m):
            return P.encode_response_frame(m, v, corr)[4:]
        return body, enc, (lambda b: P.decode_response_frame(b, key, v)[1])
    raise ValueError("unknown target %r" % target)


def _alloc_limit(n: int) -> int:
    # Python objects built from n input bytes: generous per-byte overhead, plus slack.
    return (1 << 20) + 256 * n


def check(target: str, data, measure_memory: bool = False) -> str:
    """Decode data as target and check the bad-input rules. Returns "ok" or the name of the
    ProtocolError raised; raises FuzzFailure when a rule is broken. measure_memory also
    checks (with tracemalloc, slow) that decoding allocates no more than _alloc_limit."""
    if measure_memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    try:
        try:
            msg, enc, dec = _decode(target, data)
        finally:
            if measure_memory:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                if peak > _alloc_limit(len(data)):
                    raise FuzzFailure("decoding %d bytes allocated %d bytes"
                                      % (len(data), peak))
    except FuzzFailure:
        raise
    except P.ProtocolError as e:
        dt = time.perf_counter() - t0
        if dt > SLOW_DECODE_SECONDS:
            raise FuzzFailure("rejecting took %.3f s" % dt) from e
        if isinstance(e, P.DecodeError):
            if not isinstance(e.field, str) or not e.field:
                raise FuzzFailure("DecodeError without a field: %r" % (e,)) from e
            if not isinstance(e.offset, int) or not 0 <= e.offset <= len(data):
                raise FuzzFailure("DecodeError offset %r outside 0..%d: %r"
                                  % (e.offset, len(data), e)) from e
            if target == "request-frame" and not hasattr(e, "header"):
                raise FuzzFailure("request-frame DecodeError without .header: %r" % (e,)) from e
        if isinstance(e, P.UnsupportedVersionError) and target == "request-frame":
            for a in ("api_key", "api_version", "correlation_id"):
                if not isinstance(getattr(e, a, None), int):
                    raise FuzzFailure("UnsupportedVersionError without int .%s: %r"
                                      % (a, e)) from e
        return type(e).__name__
    except Exception as e:
        raise FuzzFailure("decode raised %s (not a ProtocolError): %r"
                          % (type(e).__name__, e)) from e
    dt = time.perf_counter() - t0
    if dt > SLOW_DECODE_SECONDS:
        raise FuzzFailure("decoding took %.3f s" % dt)
    try:
        once = enc(msg)
    except Exception as e:
        raise FuzzFailure("decoded %r but re-encoding raised %r" % (msg, e)) from e
    try:
        twice = enc(dec(once))
    except Exception as e:
        raise FuzzFailure("re-encoded bytes %s do not decode/encode again: %r"
                          % (once.hex(), e)) from e
    if twice != once:
        raise FuzzFailure("not a fixpoint: encode(decode(x)) = %s, then %s"
                          % (once.hex(), twice.hex()))
    return "ok"


# ------------------------------------------------------------------ mutations

PATTERN_BYTES = (0xFF, 0x80, 0x7F, 0x00)
INTERESTING = (
    b"\xff", b"\x80", b"\x7f", b"\x00", b"\x01",
    b"\x7f\xff", b"\x80\x00", b"\xff\xff", b"\xff\xfe", b"\x75\x30",          # int16 lengths
    b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", b"\xff\xff\xff\xfe",
    b"\x00\x00\xff\xff",                                                      # int32 lengths
    b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x1f",  # uvarints
    b"\x80\x80\x80\x80\x80\x00", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",   # too long
    b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82",           # bad UTF-8
)


def mutate(rng: random.Random, data: bytes, donor: bytes = b"") -> bytes:
    """1..4 random mutations of data; donor is spliced from by one of them."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 4))):
        op = rng.randrange(10)
        pos = rng.randint(0, len(b))
        if op == 0 and pos < len(b):                         # bit flip
            b[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and pos < len(b):                       # +-1 (off-by-one lengths)
            b[pos] = (b[pos] + rng.choice((1, -1))) & 0xFF
        elif op == 2:                                        # overwrite a pattern run
            n = rng.randint(1, 6)
            b[pos:pos + n] = bytes([rng.choice(PATTERN_BYTES)]) * n
        elif op == 3:                                        # insert a pattern run
            b[pos:pos] = bytes([rng.choice(PATTERN_BYTES)]) * rng.randint(1, 6)
        elif op == 4:                                        # overwrite an interesting value
            v = rng.choice(INTERESTING)
            b[pos:pos + len(v)] = v
        elif op == 5:                                        # insert an interesting value
            b[pos:pos] = rng.choice(INTERESTING)
        elif op == 6:                                        # delete a range
            del b[pos:pos + rng.randint(1, 8)]
        elif op == 7:                                        # truncate
            del b[pos:]
        elif op == 8 and donor:                              # splice from another input
            s = rng.randrange(len(donor))
            b[pos:pos + rng.randint(0, 8)] = donor[s:s + rng.randint(1, 16)]
        else:                                                # random bytes
            b[pos:pos] = rng.randbytes(rng.randint(1, 4))
    return bytes(b)


def sample(rng: random.Random):
    """(target, valid bytes) for a random message of a random case and form."""
    name, v = rng.choice(CASES)
    msg = random_message(rng, name, v)
    target = target_of(name, v, frame=rng.random() < 0.5)
    return target, encode_for(target, msg, v, rng)


def _failure_kind(target: str, data: bytes):
    try:
        check(target, data)
    except FuzzFailure as e:
        cause = e.__cause__
        return str(e).split(":")[0], type(cause).__name__ if cause else None
    return None


def minimize(target: str, data: bytes, seconds: float = 5.0) -> bytes:
    """Greedy delta debugging: drop chunks of data while it still fails the same way."""
    kind = _failure_kind(target, data)
    if kind is None:
        return data
    deadline = time.monotonic() + seconds
    n = max(1, len(data) // 2)
    while n >= 1 and time.monotonic() < deadline:
        i, shrunk = 0, False
        while i < len(data) and time.monotonic() < deadline:
            cand = data[:i] + data[i + n:]
            if _failure_kind(target, cand) == kind:
                data, shrunk = cand, True
            else:
                i += n
        if not shrunk:
            n //= 2
    return data


# ------------------------------------------------------------------ CLI

def _replay_cmd(target: str, data: bytes) -> str:
    return "PYTHONPATH=src %s tests/fuzz_codec.py --replay %s %s" % (
        os.path.basename(sys.executable) or "python", target, data.hex())


class _LastInput:
    """Keeps the input under test in a memory-mapped file (survives a hard crash)."""

    SIZE = 8 << 20

    def __init__(self, path: str):
        with open(path, "wb") as fh:
            fh.truncate(self.SIZE)
        self._fh = open(path, "r+b")
        self._mm = mmap.mmap(self._fh.fileno(), self.SIZE)

    def put(self, target: str, data: bytes) -> None:
        rec = target.encode() + b"\n" + data
        rec = rec[:self.SIZE - 4]
        self._mm[0:4] = struct.pack(">I", len(rec))
        self._mm[4:4 + len(rec)] = rec


def run(seconds: float, seed: int, last_input: str | None = None, pool_size: int = 2000,
        max_failures: int = 20, out=sys.stdout) -> int:
    rng = random.Random(seed)
    print("fuzz_codec: seed %d, %d s, %d message/version cases (replay this run with "
          "--seed %d)" % (seed, seconds, len(CASES), seed), file=out, flush=True)
    keeper = _LastInput(last_input) if last_input else None
    pool = []
    stats: dict = {}
    failures = 0
    seen_failures = set()
    iters = 0
    t0 = time.monotonic()
    next_report = t0 + 30
    deadline = t0 + seconds
    while True:
        if iters % 256 == 0:
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= next_report:
                print("  %8d iterations, %.0f/s, %d failure(s)" % (
                    iters, iters / (now - t0), failures), file=out, flush=True)
                next_report = now + 30
        iters += 1
        if len(pool) < pool_size or rng.random() < 0.02:
            s = sample(rng)
            if len(pool) < pool_size:
                pool.append(s)
            else:
                pool[rng.randrange(pool_size)] = s
        target, valid = rng.choice(pool)
        r = rng.random()
        if r < 0.03:
            data = rng.randbytes(rng.randint(0, 64))
        elif r < 0.05:
            data = valid[:rng.randint(0, len(valid))]
        else:
            data = mutate(rng, valid, rng.choice(pool)[1])
        if keeper:
            keeper.put(target, data)
        try:
            res = check(target, data, measure_memory=iters % 509 == 0)
        except FuzzFailure as e:
            failures += 1
            key = (target.split(":")[0], str(e)[:60])
            if key not in seen_failures:
                seen_failures.add(key)
                small = minimize(target, data)
                print("FAIL [%s] %s\n  input: %s\n  minimized: %s\n  replay: %s" % (
                    target, e, data.hex(), small.hex(), _replay_cmd(target, small)),
                    file=out, flush=True)
            if failures >= max_failures:
                print("stopping after %d failures" % failures, file=out)
                break
            continue
        stats[res] = stats.get(res, 0) + 1
    dt = time.monotonic() - t0
    print("fuzz_codec: seed %d: %d iterations in %.1f s (%.0f/s), %d failure(s)"
          % (seed, iters, dt, iters / dt if dt else 0.0, failures), file=out)
    print("  outcomes: " + ", ".join("%s %d" % kv for kv in sorted(stats.items())), file=out)
    return 1 if failures else 0


def replay(target: str, hexdata: str) -> int:
    data = bytes.fromhex(hexdata)
    try:
        res = check(target, data)
    except FuzzFailure:
        import traceback
        traceback.print_exc()
        return 1
    print("%s: %s" % (target, res))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=None,
                    help="default: random (printed at start, so any run can be replayed)")
    ap.add_argument("--last-input", metavar="FILE",
                    help="keep the input being decoded in FILE (crash forensics)")
    ap.add_argument("--max-failures", type=int, default=20)
    ap.add_argument("--replay", nargs=2, metavar=("TARGET", "HEX"),
                    help="check one input, e.g. --replay body:JoinGroupRequest:5 0001...")
    a = ap.parse_args(argv)
    if a.replay:
        return replay(*a.replay)
    import faulthandler
    faulthandler.enable()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 32)
    return run(a.seconds, seed, a.last_input, max_failures=a.max_failures)


if __name__ == "__main__":
    sys.exit(main())
