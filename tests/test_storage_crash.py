"""Crash test with a real child process: it appends and flushes under load, printing each
durable offset after its flush; the parent SIGKILLs it at random (seeded, printed) moments,
reopens the log and checks that every acknowledged record is there and that the log is a
prefix of what was written. Bounded to ~15 s."""
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from groupcoord.storage import Log

CHILD = textwrap.dedent("""
    import random, sys
    from groupcoord.storage import Log

    def rec(i):
        return (b"key-%d" % (i % 101), None if i % 17 == 0 else b"v%d-" % i + b"x" * (i % 300))

    d, seed = sys.argv[1], int(sys.argv[2])
    r = random.Random(seed)
    lg = Log(d, segment_bytes=256 << 10)
    print("start", lg.next_offset, flush=True)
    while True:
        for _ in range(r.randint(1, 20)):            # many appends, one flush
            n = lg.next_offset
            lg.append([rec(i) for i in range(n, n + r.randint(1, 30))], 1_700_000_000_000 + n)
        print("durable", lg.flush(), flush=True)
""")


def rec(i):
    return (b"key-%d" % (i % 101), None if i % 17 == 0 else b"v%d-" % i + b"x" * (i % 300))


def test_sigkill_at_random_points_loses_nothing_acknowledged(tmp_path):
    seed = int(os.environ.get("GROUPCOORD_CRASH_SEED", random.randrange(1 << 30)))
    print("crash test seed", seed, "(GROUPCOORD_CRASH_SEED=%d to repeat)" % seed)
    r = random.Random(seed)
    d = str(tmp_path / "log")
    env = dict(os.environ)
    # The child imports groupcoord from where this process did (src/ in a development tree,
    # site-packages when installed: a fresh clone's src/ has no built native modules).
    import groupcoord
    root = os.path.dirname(os.path.dirname(os.path.abspath(groupcoord.__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    deadline = time.monotonic() + 15
    acked = 0
    kills = 0
    # At least 5 kills even on a loaded machine (child start-up is slow there), at most 40.
    while (time.monotonic() < deadline or kills < 5) and kills < 40:
        p = subprocess.Popen([sys.executable, "-c", CHILD, d, str(r.randrange(1 << 30))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            first = p.stdout.readline()                 # the child has opened (recovered)
            assert first.startswith(b"start"), (first, p.stderr.read())
            assert int(first.split()[1]) >= acked
            if kills == 0:
                # Let the first child acknowledge something, so the test always checks a
                # non-empty acknowledged prefix, however slow the machine is.
                line = p.stdout.readline()
                if line.startswith(b"durable"):
                    acked = max(acked, int(line.split()[1]))
            time.sleep(r.uniform(0.0, 0.3))     # the subject: a random (seeded) kill moment
            p.send_signal(signal.SIGKILL)
            out, _err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        kills += 1
        # Only complete lines: the kill may cut the last one mid-write.
        for line in out.split(b"\n")[:-1]:
            if line.startswith(b"durable"):
                acked = max(acked, int(line.split()[1]))
        with Log(d) as lg:
            got = list(lg.read())
            assert lg.next_offset == len(got) >= acked, (seed, kills, lg.next_offset, acked)
        assert [o for o, _k, _v in got] == list(range(len(got)))
        assert all((k, v) == rec(o) for o, k, v in got), "log is not a prefix of the writes"
    assert kills >= 5 and acked > 0
