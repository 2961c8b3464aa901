"""The device check's numbers (scripts/device-check.sh): the run's cap from a profile, and
the results folder's summary.md / summary.json from the stages' logs and artifacts.

    python scripts/device_check_summary.py cap PROFILE.json
    python scripts/device_check_summary.py summarize --work DIR --out DIR [--wall-s S]

Standard library only, Python 3.8 and later: it runs on whatever interpreter runs the check
(a Jetson's Python 3.8 included), never imports undercap or torch, and reads every file it
is given defensively: a stage that failed leaves a log and no artifact, and the summary
says what happened rather than failing itself.

summary.json is a list of stage records, one per stage in the order they ran:
    stage      name (nvidia-smi, devices, profile, estimate-<model>, run, tests)
    status     passed | failed | timeout | interrupted | skipped
    exit_code  the command's exit status (124 or 137: ran out of time), null if skipped
    wall_s     seconds the stage took, null if skipped
    limit_s    its time limit
    key        the key numbers in one line (the table's last column)
    error      the last meaningful line of a failed stage's log, else null
    log        its log's name inside logs.tgz
    numbers    the key numbers as a dict (for pandas: pd.DataFrame(json.load(f)))
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

#: artifacts copied from the work folder into the results folder (at most 8 files in all:
#: these five, summary.md, summary.json and logs.tgz)
ARTIFACTS = (
    "profile-resnet18.json",
    "eff-resnet18-cifarq.json",
    "eff-mobilenetv2-cifarq.json",
    "eff-char-transformer-shakespeare.json",
    "run-train.json",
)
TIMEOUT_CODES = (124, 137)


def _load_json(path: Path) -> Optional[Any]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _float(text: Any) -> Optional[float]:
    try:
        v = float(str(text).strip().split()[0])
    except (ValueError, IndexError):
        return None
    return v if math.isfinite(v) else None


def _fmt(v: Optional[float], digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


# --- the cap -------------------------------------------------------------------------------


def cap_from_profile(profile: Dict[str, Any]) -> float:
    """Two thirds of the way up the profiled rows' peak + margin, rounded up to 0.1 W: the
    rows below it fit, the rest do not, so the cap binds (read-only, the batch size is the
    knob). Raises ValueError when the profile has no rows."""
    rows = profile.get("rows") or []
    v = sorted(
        float(r["peak_power_w"]) + float(r.get("peak_margin_w") or 0.0)
        for r in rows
        if r.get("peak_power_w") is not None
    )
    if not v:
        raise ValueError("the profile has no rows")
    return math.ceil(v[(len(v) - 1) * 2 // 3] * 10 - 1e-9) / 10


# --- key numbers per stage -------------------------------------------------------------------


def last_error(text: str) -> Optional[str]:
    """The line that says why a command failed: its last 'error:' line, else the last line
    of a traceback, else the last non-empty line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    for ln in reversed(lines):
        if ln.lower().startswith("error:"):
            return ln
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", ln):
            return ln
    return lines[-1]


def nvidia_smi_numbers(snapshot: str, trace: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    rows = list(csv.reader(snapshot.splitlines()))
    if len(rows) >= 2:
        head = [h.strip() for h in rows[0]]
        vals = [v.strip() for v in rows[1]]
        row = dict(zip(head, vals))
        out["gpu"] = row.get("name")
        out["driver"] = row.get("driver_version")
        out["power_limit_w"] = _float(row.get("power.limit [W]", ""))
        out["power_draw_w"] = _float(row.get("power.draw [W]", ""))
        out["sm_clock_mhz"] = _float(row.get("clocks.current.sm [MHz]", ""))
        out["sm_clock_max_mhz"] = _float(row.get("clocks.max.sm [MHz]", ""))
    watts = []
    for r in csv.reader(trace.splitlines()):
        if len(r) >= 2:
            w = _float(r[1])
            if w is not None:
                watts.append(w)
    if watts:
        out["trace_readings"] = len(watts)
        out["trace_min_w"] = min(watts)
        out["trace_max_w"] = max(watts)
    return out


def nvidia_smi_key(n: Dict[str, Any]) -> str:
    parts = []
    if n.get("gpu"):
        parts.append(
            f"{n['gpu']}, driver {n.get('driver')}, limit {_fmt(n.get('power_limit_w'))} W"
        )
        parts.append(
            f"SM {_fmt(n.get('sm_clock_mhz'), 0)}/{_fmt(n.get('sm_clock_max_mhz'), 0)} MHz"
        )
    if n.get("trace_readings"):
        parts.append(
            f"trace: {n['trace_readings']} readings, "
            f"{_fmt(n['trace_min_w'])}..{_fmt(n['trace_max_w'])} W"
        )
    return "; ".join(parts)


def devices_numbers(devices: Any, device: Optional[str]) -> Dict[str, Any]:
    if not isinstance(devices, list):
        return {}
    out: Dict[str, Any] = {"devices": [d.get("name") for d in devices if isinstance(d, dict)]}
    for d in devices:
        if isinstance(d, dict) and d.get("name") == device:
            freqs = d.get("freqs_mhz") or []
            out["device"] = device
            out["found"] = True
            if freqs:
                out["freq_min_mhz"] = min(freqs)
                out["freq_max_mhz"] = max(freqs)
                out["freq_steps"] = len(freqs)
            out["control_permitted"] = d.get("control_permitted")
            out["energy_counter"] = d.get("has_energy_counter")
    if device and "found" not in out:
        out["device"] = device
        out["found"] = False
    return out


def devices_key(n: Dict[str, Any]) -> str:
    if not n:
        return ""
    s = f"{len(n.get('devices') or [])} devices"
    if n.get("found"):
        s += (
            f"; {n['device']}: {_fmt(n.get('freq_min_mhz'))}..{_fmt(n.get('freq_max_mhz'))} MHz "
            f"({n.get('freq_steps')} steps), control {'yes' if n.get('control_permitted') else 'no'}"
            f", energy counter {'yes' if n.get('energy_counter') else 'no'}"
        )
    elif n.get("device"):
        s += f"; {n['device']} NOT listed"
    return s


def profile_numbers(profile: Any) -> Dict[str, Any]:
    if not isinstance(profile, dict):
        return {}
    rows = [r for r in profile.get("rows") or [] if isinstance(r, dict)]
    if not rows:
        return {"rows": 0}
    peaks = [float(r["peak_power_w"]) for r in rows]
    tps = [float(r["time_per_sample_s"]) for r in rows]
    return {
        "rows": len(rows),
        "batch_sizes": sorted({int(r["batch_size"]) for r in rows}),
        "freqs_mhz": sorted({float(r["freq_mhz"]) for r in rows}),
        "peak_power_min_w": min(peaks),
        "peak_power_max_w": max(peaks),
        "time_per_sample_min_us": min(tps) * 1e6,
        "time_per_sample_max_us": max(tps) * 1e6,
        "unfit_batch_sizes": profile.get("unfit_batch_sizes") or [],
    }


def profile_key(n: Dict[str, Any]) -> str:
    if not n.get("rows"):
        return "no rows" if n else ""
    bs = n["batch_sizes"]
    fs = n["freqs_mhz"]
    f = f"{fs[0]:g} MHz" if len(fs) == 1 else f"{fs[0]:g}..{fs[-1]:g} MHz"
    s = (
        f"{n['rows']} rows, b={bs[0]}..{bs[-1]} at {f}; peak power "
        f"{_fmt(n['peak_power_min_w'])}..{_fmt(n['peak_power_max_w'])} W; t "
        f"{n['time_per_sample_min_us']:.0f}..{n['time_per_sample_max_us']:.0f} us/sample"
    )
    if n.get("unfit_batch_sizes"):
        s += f"; did not fit: {n['unfit_batch_sizes']}"
    return s


def efficiency_numbers(eff: Any) -> Dict[str, Any]:
    if not isinstance(eff, dict):
        return {}
    means = eff.get("samples_to_target_mean") or {}
    reached = eff.get("reached") or {}
    cfg = eff.get("config") or {}
    bs = sorted({int(b) for b in list(means) + list(reached)} | set(cfg.get("batch_sizes") or []))
    n_b: Dict[str, Optional[float]] = {}
    for b in bs:
        v = means.get(str(b))
        n_b[str(b)] = None if v is None else float(v)
    cost = eff.get("cost") or {}
    return {
        "model": eff.get("model"),
        "dataset": eff.get("dataset"),
        "target_accuracy": eff.get("target_accuracy"),
        "N_b": n_b,
        "r_b": {str(k): v for k, v in (eff.get("relative") or {}).items()},
        "reached": {str(k): v for k, v in reached.items()},
        "elapsed_s": cost.get("elapsed_s"),
        "eval_wall_s": cost.get("eval_wall_s"),
        "train_wall_s": cost.get("train_wall_s"),
    }


def efficiency_key(n: Dict[str, Any]) -> str:
    if not n:
        return ""
    parts = []
    for b, v in n["N_b"].items():
        parts.append(f"{b}: {'-' if v is None else f'{v:.0f}'}")
    s = f"N(b) to {n.get('target_accuracy')}: " + ", ".join(parts)
    if n.get("eval_wall_s") is not None and n.get("train_wall_s") is not None:
        s += f" (train {n['train_wall_s']:.1f} s, eval {n['eval_wall_s']:.1f} s)"
    return s


def mixed_numbers(name: str, work: Path) -> Tuple[Dict[str, Any], str]:
    """Mixed precision beside fp32: t(b) and peak power per batch size of the two
    profiles (their ratios), or N(b) of the two estimates."""
    if name == "estimate-resnet18-mixed":
        n = efficiency_numbers(_load_json(work / "logs" / "eff-resnet18-mixed.json"))
        fp32 = efficiency_numbers(_load_json(work / "eff-resnet18-cifarq.json"))
        return n, efficiency_key(n) + (f"; fp32: {efficiency_key(fp32)}" if fp32 else "")
    mixed = _load_json(work / "logs" / "profile-resnet18-mixed.json")
    fp32 = _load_json(work / "profile-resnet18.json")
    n = profile_numbers(mixed)
    rows = {p: {int(r["batch_size"]): r for r in (d or {}).get("rows") or []}
            for p, d in (("mixed", mixed), ("fp32", fp32))}  # fmt: skip
    common = sorted(set(rows["mixed"]) & set(rows["fp32"]))
    n["time_ratio"] = {
        b: rows["mixed"][b]["time_per_sample_s"] / rows["fp32"][b]["time_per_sample_s"]
        for b in common
    }
    n["peak_ratio"] = {
        b: rows["mixed"][b]["peak_power_w"] / rows["fp32"][b]["peak_power_w"] for b in common
    }
    if not common:
        return n, profile_key(n)
    t, w = n["time_ratio"].values(), n["peak_ratio"].values()
    return n, (f"{profile_key(n)}; against fp32: t x{min(t):.2f}..{max(t):.2f}, "
               f"peak x{min(w):.2f}..{max(w):.2f}")  # fmt: skip


_SELECTED = re.compile(r"selected batch size (\d+) at ([\d.]+) MHz(?: \(limit ([^)]*)\))?")


def run_numbers(run_dir: Path, log: str, cap: Optional[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"cap_w": _float(cap) if cap else None}
    sel = _load_json(run_dir / "selection.json")
    if isinstance(sel, dict):
        out["batch_size"] = sel.get("batch_size")
        out["freq_mhz"] = sel.get("freq_mhz")
        out["predicted_time_s"] = sel.get("predicted_time_s")
    else:
        found = _SELECTED.findall(log)
        if found:
            b, f, _limit = found[-1]
            out["batch_size"] = int(b)
            out["freq_mhz"] = float(f)
    res = _load_json(run_dir / "train.json")
    if isinstance(res, dict):
        for k in (
            "reached",
            "time_to_accuracy_s",
            "train_time_s",
            "samples_to_target",
            "final_accuracy",
            "peak_power_w",
            "max_raw_power_w",
            "mean_power_w",
            "energy_j",
            "limit_exceeded",
            "clocks",
        ):
            out[k] = res.get(k)
    return out


def run_key(n: Dict[str, Any]) -> str:
    parts = []
    if n.get("cap_w") is not None:
        parts.append(f"cap {n['cap_w']:g} W")
    if n.get("batch_size") is not None:
        parts.append(f"selected b={n['batch_size']} at {_fmt(n.get('freq_mhz'))} MHz")
    if "reached" in n:
        tta = n.get("time_to_accuracy_s")
        parts.append(
            f"reached in {tta:.1f} s"
            if n.get("reached") and tta is not None
            else "target not reached"
        )
        parts.append(
            f"peak {_fmt(n.get('peak_power_w'))} W (windowed), raw max {_fmt(n.get('max_raw_power_w'))} W"
        )
        if n.get("clocks"):
            parts.append(str(n["clocks"]))
    return "; ".join(parts)


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def tests_numbers(log: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    summary = None
    for ln in log.splitlines():
        if re.search(r"\d+ (passed|failed|error)", ln) and re.search(r" in [\d.]+s", ln):
            summary = ln
    if summary:
        for count, what in _COUNT.findall(summary):
            out["error" if what.startswith("error") else what] = int(count)
    failed = [
        ln.split(" - ")[0].split(" ", 1)[1]
        for ln in log.splitlines()
        if ln.startswith(("FAILED ", "ERROR "))
    ]
    if failed:
        out["failures"] = failed
    return out


def tests_key(n: Dict[str, Any]) -> str:
    if not n:
        return ""
    s = ", ".join(
        f"{n[k]} {k}" for k in ("passed", "failed", "error", "skipped", "deselected") if k in n
    )
    if n.get("failures"):
        s += "; failed: " + ", ".join(n["failures"][:3])
        if len(n["failures"]) > 3:
            s += f" and {len(n['failures']) - 3} more"
    return s


# --- the summary -------------------------------------------------------------------------------


def read_stages(path: Path) -> List[Dict[str, Any]]:
    records = []
    for ln in _read(path).splitlines():
        f = ln.split("\t")
        if len(f) < 7:
            continue
        name, rc, start, end, limit, log, note = f[:7]
        code = int(rc) if rc.strip().lstrip("-").isdigit() else None
        s, e = _float(start), _float(end)
        wall = round(e - s, 1) if s is not None and e is not None else None
        if code is None:
            status = "skipped"
        elif note == "interrupted" and code != 0:
            status = "interrupted"
        elif code == 0:
            status = "passed"
        elif code in TIMEOUT_CODES:
            status = "timeout"
        else:
            status = "failed"
        records.append(
            {
                "stage": name,
                "status": status,
                "exit_code": code,
                "wall_s": wall,
                "limit_s": _float(limit),
                "key": "",
                "error": None,
                "log": log or None,
                "note": note or None,
                "numbers": {},
            }
        )
    return records


def env_info(text: str) -> Dict[str, str]:
    out = {}
    for ln in text.splitlines():
        if ": " in ln:
            k, v = ln.split(": ", 1)
            out[k.strip()] = v.strip()
        elif " " in ln:
            k, v = ln.split(" ", 1)
            out.setdefault(k.strip(), v.strip())
    return out


def fill(records: List[Dict[str, Any]], work: Path, env: Dict[str, str]) -> None:
    logs = work / "logs"
    for r in records:
        name = r["stage"]
        log = _read(logs / r["log"]) if r["log"] else ""
        n: Dict[str, Any] = {}
        key = ""
        if name == "nvidia-smi":
            n = nvidia_smi_numbers(log, _read(logs / "smi-trace.csv"))
            key = nvidia_smi_key(n)
        elif name == "devices":
            n = devices_numbers(_load_json(logs / "devices.json"), env.get("device"))
            key = devices_key(n)
        elif name == "profile":
            n = profile_numbers(_load_json(work / "profile-resnet18.json"))
            key = profile_key(n)
        elif name in ("profile-mixed", "estimate-resnet18-mixed"):
            n, key = mixed_numbers(name, work)
        elif name.startswith("estimate-"):
            model = name[len("estimate-") :]
            files = sorted(work.glob(f"eff-{model}-*.json"))
            n = efficiency_numbers(_load_json(files[0])) if files else {}
            key = efficiency_key(n)
        elif name == "run":
            n = run_numbers(work / "run", log, env.get("cap"))
            key = run_key(n)
        elif name == "tests":
            n = tests_numbers(log)
            key = tests_key(n)
        if r["status"] == "timeout" and r["limit_s"] is not None:
            r["error"] = f"out of time after {r['limit_s']:g} s"
        elif r["status"] == "interrupted":
            r["error"] = "interrupted (INT or TERM)"
        elif r["status"] in ("failed", "timeout"):
            counted = name == "tests" and ("failed" in n or "error" in n)
            r["error"] = (
                "failed (-x: the suite stops at its first failure)" if counted else last_error(log)
            )
        if r["status"] == "skipped":
            key = r["note"] or "skipped"
        r["numbers"] = n
        r["key"] = key


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(records: List[Dict[str, Any]], env: Dict[str, str], wall_s: Optional[float]) -> str:
    mode = env.get("mode", "?")
    lines = [
        "# undercap device check"
        + (" (DRY RUN: simulated device, CPU)" if mode == "dry-run" else ""),
        "",
        f"- date: {env.get('date', '-')}; git {env.get('git', '-')}; {env.get('undercap', '-')}",
        f"- device: {env.get('device', '-')}; torch device: {env.get('torch_device', '-')}; "
        f"torch {env.get('torch', '-')}, python {env.get('python', '-')}, "
        f"CUDA: {env.get('cuda', '-')}",
        f"- read-only: no clock locked, no power limit set; total {_fmt(wall_s, 0)} s "
        f"(budget {env.get('budget_s', '-')} s)",
        "",
        "| stage | exit | wall s | limit s | key numbers |",
        "|---|---|---|---|---|",
    ]
    for r in records:
        code = "-" if r["exit_code"] is None else str(r["exit_code"])
        key = r["key"] or ""
        if r["error"]:
            key = (key + "; " if key else "") + "**" + r["error"][:200] + "**"
        lines.append(
            f"| {r['stage']} | {code} | {_fmt(r['wall_s'])} | {_fmt(r['limit_s'], 0)} | {_cell(key)} |"
        )
    bad = [r["stage"] for r in records if r["status"] in ("failed", "timeout", "interrupted")]
    lines += [
        "",
        f"{sum(r['status'] == 'passed' for r in records)} of {len(records)} stages passed"
        + (f"; not passed: {', '.join(bad)}" if bad else "")
        + ". Logs, devices.txt/.json, the nvidia-smi snapshot and trace and the run's "
        "folder (without its checkpoint) are in logs.tgz.",
        "",
    ]
    return "\n".join(lines)


def summarize(work: Path, out: Path, wall_s: Optional[float]) -> int:
    env = env_info(_read(work / "env.txt"))
    records = read_stages(work / "stages.tsv")
    fill(records, work, env)
    out.mkdir(parents=True, exist_ok=True)
    for name in ARTIFACTS:  # stale copies from an earlier check must not pass for this one's
        target = out / name
        if target.exists():
            target.unlink()
        if (work / name).is_file():
            shutil.copyfile(work / name, target)
    (out / "summary.json").write_text(json.dumps(records, indent=1) + "\n")
    text = render(records, env, wall_s)
    (out / "summary.md").write_text(text)
    print(text)
    failed = [r for r in records if r["status"] in ("failed", "timeout", "interrupted")]
    failed += [r for r in records if r["status"] == "skipped" and "budget" in (r["note"] or "")]
    return 1 if failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    c = sub.add_parser("cap", help="print the run's cap in W from a profile")
    c.add_argument("profile", type=Path)
    s = sub.add_parser("summarize", help="write summary.md and summary.json")
    s.add_argument("--work", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--wall-s", type=float, default=None)
    args = p.parse_args(argv)
    if args.cmd == "cap":
        profile = _load_json(args.profile)
        try:
            print(f"{cap_from_profile(profile if isinstance(profile, dict) else {}):g}")
        except (ValueError, KeyError, TypeError) as e:
            print(f"error: no cap from {args.profile}: {e}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "summarize":
        return summarize(args.work, args.out, args.wall_s)
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
