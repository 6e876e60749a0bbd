"""`groupcoord log verify` and the log checkpoint it reads (storage/verify.py,
storage/checkpoint.py): usage and exit statuses, the checkpoint's strict format, and the
checkpoint staying true through rolls, compaction (and a compaction interrupted between its
checkpoint write and its rename), empty logs and reopen."""
import os
import subprocess
import sys

import pytest

from groupcoord.cli import main
from groupcoord.storage import CorruptLogError, Log, segment_name
from groupcoord.storage.checkpoint import (CHECKPOINT_NAME, Checkpoint, CheckpointError,
                                           format_checkpoint, parse_checkpoint,
                                           read_checkpoint)
from groupcoord.storage.segment import FileOps
from groupcoord.storage.verify import analyze
from serve_proc import package_root

TS = 1_700_000_000_000


def fill(lg, n, keys=5, start=0):
    for i in range(start, start + n):
        lg.append([(b"key-%d" % (i % keys), b"value-%d" % i)], TS)
        lg.flush()


def verify(path, capsys):
    rc = main(["log", "verify", str(path)])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ usage
def test_usage_errors_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["log", "verify"])
    assert e.value.code == 2
    assert verify(tmp_path / "missing", capsys)[0] == 2
    (tmp_path / "file").write_bytes(b"x")
    rc, _out, err = verify(tmp_path / "file", capsys)
    assert rc == 2 and "not a directory" in err
    (tmp_path / "empty").mkdir()
    rc, _out, err = verify(tmp_path / "empty", capsys)
    assert rc == 2 and "no log in" in err


@pytest.mark.integration          # a child process
def test_help_explains_the_exit_statuses():
    env = dict(os.environ, PYTHONPATH=package_root())
    r = subprocess.run([sys.executable, "-m", "groupcoord.cli", "log", "verify", "--help"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "0 clean, 1 corruption found, 2 usage error" in text
    assert "nothing is truncated or removed" in text


def test_clean_and_corrupt_logs(tmp_path, capsys):
    d = tmp_path / "__consumer_offsets-0"
    with Log(str(d), segment_bytes=300) as lg:
        fill(lg, 20)
        segs = [s.path for s in lg.segments()]
    assert len(segs) >= 3
    rc, out, _ = verify(tmp_path, capsys)          # the data dir: finds the shard dir
    assert rc == 0 and out.splitlines()[-1].startswith("checked 1 log directory (") \
        and out.splitlines()[-1].endswith(": clean")
    os.unlink(segs[1])
    with open(segs[2], "r+b") as f:                 # and a bad CRC in another closed segment
        f.seek(30)
        f.write(b"\xff")
    rc, out, _ = verify(d, capsys)
    lines = out.splitlines()
    assert rc == 1
    assert lines[0].startswith(segs[1] + ": position 0 (log offset ")
    assert "segment file missing" in lines[0]
    assert lines[1].startswith(segs[2] + ": position 0 (") and "CRC32C mismatch" in lines[1]
    assert lines[-1].endswith("2 problem(s) in 1 log(s)")
    with pytest.raises(CorruptLogError) as e:
        Log(str(d))
    assert len(e.value.problems) == 2 and "(and 1 more problem(s))" in str(e.value)


# ------------------------------------------------------------------ the checkpoint file
def test_checkpoint_round_trip_and_strict_parse(tmp_path):
    cp = Checkpoint(42, ((0, (100,)), (7, (90, 60)), (20, (0,))))
    data = format_checkpoint(cp)
    assert parse_checkpoint(data) == cp
    bad = [data[:-1], data[:-10], data.replace(b"segment 7", b"segment 9"),
           b"x" + data[1:], data.replace(b"\n", b"\r\n"), b"\xff" + data[1:], b""]
    for b in bad:
        with pytest.raises(CheckpointError):
            parse_checkpoint(b)
    body = b"groupcoord log checkpoint 1\ndurable-offset 5\nsegment 7 1\nsegment 3 1\n"
    from crc32c import crc32c
    with pytest.raises(CheckpointError, match="not ascending"):
        parse_checkpoint(body + b"crc32c %08x\n" % crc32c(body))


def test_an_unreadable_checkpoint_is_corruption(tmp_path, capsys):
    d = str(tmp_path)
    with Log(d) as lg:
        fill(lg, 3)
    p = os.path.join(d, CHECKPOINT_NAME)
    data = bytearray(open(p, "rb").read())
    data[30] ^= 1
    open(p, "wb").write(bytes(data))
    rc, out, _ = verify(d, capsys)
    assert rc == 1 and out.startswith(p + ": position 0 (log offset ?): the checkpoint is "
                                          "unreadable (line ")
    with pytest.raises(CorruptLogError, match=CHECKPOINT_NAME):
        Log(d)


def test_an_empty_log_writes_no_checkpoint_and_the_first_record_does_at_close(tmp_path):
    d = str(tmp_path)
    with Log(d) as lg:
        pass
    assert os.listdir(d) == [segment_name(0)]
    with Log(d) as lg:
        fill(lg, 2)
    assert read_checkpoint(d) == Checkpoint(2, ((0, (os.path.getsize(
        os.path.join(d, segment_name(0))),)),))


def test_each_roll_lists_the_new_segment_before_it_gets_data(tmp_path):
    d = str(tmp_path)
    lg = Log(d, segment_bytes=200)
    fill(lg, 6)
    segs = lg.segments()
    assert len(segs) >= 2
    cp = read_checkpoint(d)                     # written by the last roll (no close yet)
    assert [b for b, _s in cp.segments] == [s.base_offset for s in segs]
    assert cp.segments[-1] == (segs[-1].base_offset, (0,))
    assert all(sizes == (s.size,) for (_b, sizes), s in zip(cp.segments[:-1], segs[:-1]))
    # a kill -9 now: the active segment's bytes are after the durable point (a torn tail
    # there is truncated), the closed ones are fully covered
    with open(segs[-1].path, "ab") as f:
        f.write(b"\x00" * 7)
    lg2 = Log(d, segment_bytes=200)
    assert lg2.truncated_bytes == 7 and lg2.next_offset == lg.next_offset
    lg2.close()
    lg.close(flush=False)


class _FailCompactionRename(FileOps):
    """The OS, except around the rename of a compaction output: the rename fails ("before":
    the old file stays), or the directory fsync after it fails ("after": the new file is in
    place, the log never swaps it in). Either way the checkpoint written before the rename
    must accept what is on disk."""

    def __init__(self, when):
        self.when = when
        self.renamed = False

    def replace(self, src, dst):
        if src.endswith(".cleaned") and self.when == "before":
            raise OSError(5, "EIO (injected)")
        super().replace(src, dst)
        self.renamed = src.endswith(".cleaned")

    def fsync_dir(self, path):
        if self.renamed and self.when == "after":
            raise OSError(5, "EIO (injected)")
        super().fsync_dir(path)


@pytest.mark.parametrize("when", ["before", "after"])
def test_compaction_keeps_the_checkpoint_true(tmp_path, capsys, when):
    d = str(tmp_path)
    with Log(d, segment_bytes=250) as lg:
        fill(lg, 40, keys=3)                    # many superseded values: segments shrink
        n_before = len(lg.segments())
        before = {s.base_offset: s.size for s in lg.segments()}
    # interrupted: the checkpoint allows both sizes of the first rewritten segment
    lg = Log(d, segment_bytes=250, ops=_FailCompactionRename(when))
    with pytest.raises(OSError):
        lg.compact(0, TS + 1)
    cp = read_checkpoint(d)
    assert any(len(sizes) == 2 for _b, sizes in cp.segments)
    lg.close(flush=False)
    sizes_now = {b: os.path.getsize(os.path.join(d, segment_name(b))) for b in before}
    assert (sizes_now == before) == (when == "before")
    assert verify(d, capsys)[0] == 0
    # done: every segment file stays, some shrank (to nothing), offsets and reopen hold
    with Log(d, segment_bytes=250) as lg:
        st = lg.compact(0, TS + 1)
        assert st.segments_rewritten >= 1
        after = {s.base_offset: s.size for s in lg.segments()}
    assert after.keys() == before.keys() and len(after) == n_before
    assert any(after[b] < before[b] for b in before)
    assert verify(d, capsys)[0] == 0
    with Log(d) as lg:
        assert lg.next_offset == 40
        assert sorted({k for _o, k, _v in lg.read()}) == [b"key-0", b"key-1", b"key-2"]
    assert not analyze(d).problems


def test_unsafe_no_fsync_syncs_what_the_checkpoint_vouches_for(tmp_path):
    synced = []

    class Ops(FileOps):
        def fsync(self, fd):
            synced.append(os.readlink("/proc/self/fd/%d" % fd))
            super().fsync(fd)

    d = str(tmp_path)
    with Log(d, fsync="unsafe-no-fsync", segment_bytes=200, ops=Ops()) as lg:
        fill(lg, 6)
        segs = [s.path for s in lg.segments()]
    assert set(segs) <= set(synced)             # every segment with data, at a roll or close
