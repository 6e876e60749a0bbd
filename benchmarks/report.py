"""Run the codec benchmarks and render them as a Markdown table.

    PYTHONPATH=src python benchmarks/report.py --out docs/benchmarks-codec.md

runs ``pytest benchmarks/bench_codec.py --benchmark-enable --benchmark-json=...`` in a
subprocess --repeat times (default 3) with the GC enabled, then as many times with
``--benchmark-disable-gc`` (to show how much of each row is CPython's cyclic GC), prints the
table and, with --out, writes it to a file. ``--from-json A.json B.json ... [--gc-off-json
C.json ...]`` re-renders saved runs without re-running.

Statistic: ops/s = 1 / median time per call (median over rounds), GC enabled as in any
default CPython process. For each benchmark the run with the lowest median is kept (other
processes on a shared host only ever add time); the table also shows the lowest and highest
ratio seen across the runs. The "ratio (mean)" column (1 / mean, what pytest-benchmark calls
OPS) keeps the rare long rounds - mostly full (gen 2) GC collections - in.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = "benchmarks/bench_codec.py"
TARGET_RATIO = 10.0
TARGET_HB_DECODE = 2_000_000
ROW_ORDER = ["HeartbeatRequest v4", "JoinGroupRequest v9", "JoinGroupRequest v5",
             "ConsumerGroupHeartbeatRequest v1", "ConsumerGroupHeartbeatResponse v1",
             "ConnectGroupHeartbeatRequest v0", "MetadataResponse v12"]


# ----------------------------------------------------------------------------- running

def pytest_cmd(json_path, args, disable_gc=False):
    cmd = [args.python, "-m", "pytest", BENCH, "--benchmark-enable",
           "--benchmark-json=%s" % json_path, "-q", "-p", "no:cacheprovider",
           "-W", "ignore::DeprecationWarning",
           "--benchmark-warmup=on", "--benchmark-warmup-iterations=2000",
           "--benchmark-min-time=%s" % args.min_time,
           "--benchmark-max-time=%s" % args.max_time,
           "--benchmark-min-rounds=%d" % args.min_rounds,
           "--benchmark-sort=name"]
    if disable_gc:
        cmd.append("--benchmark-disable-gc")
    if args.k:
        cmd += ["-k", args.k]
    return cmd


def run_pytest(cmd):
    env = dict(os.environ)
    src = str(ROOT / "src")
    if src not in env.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    print("+", " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env)
    if proc.returncode != 0:
        sys.exit("benchmark run failed (exit %d)" % proc.returncode)


# ----------------------------------------------------------------------------- machine

def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _nproc():
    try:
        return subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return str(os.cpu_count())


def _git_head():
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "native"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (working tree differs in src/ or native/)" if dirty else "")
    except OSError:
        return "unknown"


def _native_digest():
    """A digest of the compiled codec modules actually benchmarked, plus their newest mtime."""
    h = hashlib.sha256()
    newest = 0.0
    files = sorted((ROOT / "src/groupcoord/_native").glob("*.so"))
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
        newest = max(newest, f.stat().st_mtime)
    when = datetime.datetime.fromtimestamp(newest, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC") if files else "-"
    return "%d modules, sha256 %s, built %s" % (len(files), h.hexdigest()[:12], when)


def _versions(python):
    code = ("import sys, importlib.metadata as m;"
            "print(sys.version.split()[0]);"
            "[print(p, m.version(p)) for p in ('kafka-python','msgspec','pytest-benchmark')]")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout
        lines = out.strip().splitlines()
        return lines[0], ", ".join(lines[1:])
    except (OSError, IndexError):
        return platform.python_version(), "unknown"


def machine_info(python, native_before=None):
    pyver, libs = _versions(python)
    native = _native_digest()
    if native_before is not None and native_before != native:
        native = ("**changed during the runs** (others rebuilt the codec; re-run): before: %s; "
                  "after: %s" % (native_before, native))
    return {"nproc": _nproc(), "cpu": _cpu_model(), "python": pyver,
            "python_impl": platform.python_implementation(), "libs": libs,
            "kernel": platform.release(), "git": _git_head(), "native": native}


# ----------------------------------------------------------------------------- rendering

def _rows(data):
    """{(row, op): {impl: stats}} from one pytest-benchmark JSON."""
    out = {}
    for b in data["benchmarks"]:
        x = b["extra_info"]
        out.setdefault((x["row"], x["op"]), {})[x["impl"]] = dict(b["stats"], bytes=x.get("body_bytes"))
    return out


def merge_runs(runs):
    """One run-shaped dict keeping, per benchmark, the entry with the lowest median; and
    {(row, op): [ratio in run 1, ratio in run 2, ...]}."""
    best = {}
    for data in runs:
        for b in data["benchmarks"]:
            k = (b["group"], b["name"])
            if k not in best or b["stats"]["median"] < best[k]["stats"]["median"]:
                best[k] = b
    ratios = {}
    for data in runs:
        for key, impls in _rows(data).items():
            other = next((n for n in impls if n != "groupcoord"), None)
            if "groupcoord" in impls and other:
                ratios.setdefault(key, []).append(impls[other]["median"] /
                                                  impls["groupcoord"]["median"])
    merged = dict(runs[0], benchmarks=list(best.values()))
    return merged, ratios


def _order(key):
    row, op = key
    for i, prefix in enumerate(ROW_ORDER):
        if row.startswith(prefix):
            return (i, row, ["encode", "decode", "decode-generic"].index(op)
                    if op in ("encode", "decode", "decode-generic") else 9)
    return (len(ROW_ORDER), row, 9)


def _fmt_ops(x):
    if x >= 1e6:
        return "%.2f M" % (x / 1e6)
    if x >= 1e3:
        return "%.1f k" % (x / 1e3)
    return "%.0f" % x


def _fmt_ratio(r):
    # never print "10.0x" for a ratio that misses the 10x target
    return ("%.2fx" if abs(r - TARGET_RATIO) < 0.05 else "%.1fx") % r


def render(runs, gc_off=None, machine=None, commands=(), load=None, notes=None):
    data, run_ratios = merge_runs(runs)
    rows = _rows(data)
    rows_off = _rows(merge_runs(gc_off)[0]) if gc_off else {}
    lines = []
    w = lines.append
    w("# Codec benchmarks: groupcoord vs kafka-python")
    w("")
    w("Generated by `benchmarks/report.py` (do not edit by hand; re-run it).")
    w("")
    if machine:
        w("## Machine")
        w("")
        w("| | |")
        w("|---|---|")
        w("| CPU | %s |" % machine["cpu"])
        w("| nproc | %s |" % machine["nproc"])
        w("| Python | %s %s |" % (machine["python_impl"], machine["python"]))
        w("| libraries | %s |" % machine["libs"])
        w("| kernel | %s |" % machine["kernel"])
        w("| groupcoord | git %s; compiled codec: %s |" % (machine["git"], machine["native"]))
        if load:
            w("| load average (1 min) | %.2f before, %.2f after the runs |" % load)
        w("| date | %s |" % ", ".join(r.get("datetime", "?")[:19] for r in runs))
        w("")
    if commands:
        w("## Command")
        w("")
        w("<!-- doc-test: skip (the benchmark runs behind this page: minutes of both cores) -->")
        w("```bash")
        for c in commands:
            w(c)
        w("```")
        w("")
    w("## Results")
    w("")
    w("ops/s = 1 / median seconds per call, single thread, GC enabled (CPython defaults); "
      "best of %d run(s) per benchmark. "
      "*ratio* = groupcoord ops/s / other ops/s (target >= %gx); *runs* = lowest..highest "
      "ratio over the individual runs. "
      "*ratio (mean)* uses 1 / mean instead, so it includes the rare slow rounds "
      "(mostly full GC collections triggered by large decoded trees)%s."
      % (len(runs), TARGET_RATIO, "; *ratio, GC off*: the same, from separate runs with `--benchmark-disable-gc` "
         "(best of %d)" % len(gc_off)
         if gc_off else ""))
    w("")
    head = ("| message | op | bytes | groupcoord ops/s | vs | other ops/s | ratio | >= %gx "
            "| runs | ratio (mean) |" % TARGET_RATIO)
    sep = "|---|---|---:|---:|---|---:|---:|:---:|---:|---:|"
    if gc_off:
        head += " ratio, GC off |"
        sep += "---:|"
    w(head)
    w(sep)
    misses = []
    for key in sorted((k for k in rows if k[1] in ("encode", "decode")), key=_order):
        impls = rows[key]
        gc = impls.get("groupcoord")
        other_name = next((n for n in impls if n != "groupcoord"), None)
        if gc is None or other_name is None:
            continue
        ot = impls[other_name]
        ratio = ot["median"] / gc["median"]
        ratio_mean = ot["mean"] / gc["mean"]
        ok = ratio >= TARGET_RATIO
        if not ok:
            misses.append((key, ratio))
        label = other_name if other_name != "baseline" else "baseline (pure Python)"
        cells = [key[0], key[1], str(gc["bytes"]), _fmt_ops(1 / gc["median"]), label,
                 _fmt_ops(1 / ot["median"]), _fmt_ratio(ratio), "yes" if ok else "**no**",
                 "%.1f..%.1fx" % (min(run_ratios[key]), max(run_ratios[key])),
                 _fmt_ratio(ratio_mean)]
        if gc_off:
            off = rows_off.get(key, {})
            if "groupcoord" in off and other_name in off:
                cells.append(_fmt_ratio(off[other_name]["median"] / off["groupcoord"]["median"]))
            else:
                cells.append("-")
        w("| " + " | ".join(cells) + " |")
    w("")
    hb = rows.get(("HeartbeatRequest v4", "decode"), {}).get("groupcoord")
    if hb:
        rate = 1 / hb["median"]
        w("decode HeartbeatRequest into a Struct: %.2f M/s (target >= %.0fM/s) - %s" % (
            rate / 1e6, TARGET_HB_DECODE / 1e6, "met" if rate >= TARGET_HB_DECODE else "**missed**"))
        w("")
        extra = []
        gen = rows.get(("HeartbeatRequest v4", "decode-generic"), {}).get("groupcoord")
        if gen:
            extra.append("through the convenience API `P.decode(P.HeartbeatRequest, body, 4)` "
                         "(class -> codec lookup in Python on every call): %.2f M/s"
                         % (1 / gen["median"] / 1e6))
        harness = rows.get(("harness", "overhead"), {}).get("none")
        if harness:
            extra.append("harness overhead per timed call (timing `id(body)`): %.0f ns, "
                         "included in every number above (not subtracted)"
                         % (harness["median"] * 1e9))
        for e in extra:
            w("- " + e)
        w("")
    w("Rows labelled *baseline (pure Python)* compare against `benchmarks/baseline_py.py`, a "
      "hand-written struct.pack/unpack codec, because kafka-python 3.0.12 does not implement "
      "ConsumerGroupHeartbeat (KIP-848) or ConnectGroupHeartbeat. Before timing, every "
      "kafka-python row asserts both sides encode identical bytes (and that kafka-python "
      "re-encodes what it decoded to the same bytes); every baseline row asserts identical "
      "bytes and equal decoded Structs.")
    w("")
    if misses:
        w("Rows below the %gx target: %s." % (TARGET_RATIO, "; ".join(
            "%s %s (%s)" % (k[0].split(" (")[0], k[1], _fmt_ratio(r)) for k, r in misses)))
    else:
        w("Every row meets the %gx target." % TARGET_RATIO)
    w("")
    if notes:
        w(notes.rstrip())
        w("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the Markdown here (e.g. docs/benchmarks-codec.md)")
    ap.add_argument("--json-dir", help="keep the pytest-benchmark JSON files in this directory")
    ap.add_argument("--from-json", nargs="+", help="render these saved GC-on runs instead of running")
    ap.add_argument("--repeat", type=int, default=3, help="GC-on runs (best median is kept)")
    ap.add_argument("--gc-off-json", nargs="+", help="with --from-json: the saved GC-off runs")
    ap.add_argument("--no-gc-off-run", action="store_true",
                    help="skip the runs with --benchmark-disable-gc")
    ap.add_argument("--python", default=sys.executable, help="interpreter to run pytest with")
    ap.add_argument("--max-time", default="2.0", help="--benchmark-max-time (s per benchmark)")
    ap.add_argument("--min-time", default="0.0002", help="--benchmark-min-time (s per round)")
    ap.add_argument("--min-rounds", type=int, default=20)
    ap.add_argument("-k", help="pytest -k expression (subset of rows)")
    ap.add_argument("--notes", default=str(Path(__file__).with_name("codec-notes.md")),
                    help="hand-written Markdown appended to the report (profile notes); "
                         "default benchmarks/codec-notes.md if it exists")
    args = ap.parse_args(argv)

    commands = []
    invocation = "PYTHONPATH=src %s %s" % (
        sys.executable,
        " ".join(shlex.quote(a) for a in ["benchmarks/report.py"] + list(
            argv if argv is not None else sys.argv[1:])))
    native_before = None
    if args.from_json:
        runs = [json.loads(Path(p).read_text()) for p in args.from_json]
        gc_off = ([json.loads(Path(p).read_text()) for p in args.gc_off_json]
                  if args.gc_off_json else None)
        load = None
        commands.append("# rendered from saved runs: " + invocation)
    else:
        tmp = Path(args.json_dir) if args.json_dir else Path(tempfile.mkdtemp(prefix="gc-bench-"))
        tmp.mkdir(parents=True, exist_ok=True)
        load0 = os.getloadavg()[0]
        native_before = _native_digest()
        commands.append(invocation)
        commands.append("# which runs, %d time(s) each (run-N.json, gc-off-N.json):" % args.repeat)
        runs = []
        for i in range(args.repeat):
            cmd = pytest_cmd(tmp / ("run-%d.json" % (i + 1)), args)
            run_pytest(cmd)
            runs.append(json.loads((tmp / ("run-%d.json" % (i + 1))).read_text()))
        commands.append("PYTHONPATH=src " + " ".join(shlex.quote(c) for c in cmd).replace(
            str(tmp / ("run-%d.json" % args.repeat)), "run-N.json"))
        gc_off = None
        if not args.no_gc_off_run:
            gc_off = []
            for i in range(args.repeat):
                off_path = tmp / ("gc-off-%d.json" % (i + 1))
                cmd = pytest_cmd(off_path, args, disable_gc=True)
                run_pytest(cmd)
                gc_off.append(json.loads(off_path.read_text()))
            commands.append("PYTHONPATH=src " + " ".join(shlex.quote(c) for c in cmd).replace(
                str(off_path), "gc-off-N.json"))
        load = (load0, os.getloadavg()[0])
    notes = Path(args.notes).read_text() if args.notes and Path(args.notes).is_file() else None
    md = render(runs, gc_off, machine_info(args.python, native_before), commands, load, notes)
    print(md)
    if args.out:
        out = Path(args.out)
        if not out.is_absolute():
            out = ROOT / out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(md + "\n")
        print("wrote %s" % out, file=sys.stderr)


if __name__ == "__main__":
    main()
