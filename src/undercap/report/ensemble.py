"""The several-proxy block of `select`'s and `run`'s summaries (select/ensemble.py):
the rule's choice, each proxy's own choice, and the regret the chosen (b, f) risks
under each proxy. Pure formatting of selection extra["ensemble"]."""

from typing import Any, Dict, List, Optional


def ensemble_lines(
    block: Optional[Dict[str, Any]], indent: str = "  ", first: Optional[str] = None
) -> List[str]:
    """Nothing for one proxy. `first`: the first line's prefix (default `indent`)."""
    if not block:
        return []
    n = len(block["proxies"])
    lines = [
        f"{indent if first is None else first}several proxies ({n}): rule '{block['rule']}', {block['rule_text']} -> batch "
        f"size {block['batch_size']} at {block['freq_mhz']:g} MHz",
        "",
        f"{indent}| proxy | its own choice | r(b) at the choice | regret of the choice under it |",
        f"{indent}|---|---|---|---|",
    ]
    for p in block["proxies"]:
        pref = p["preferred"]
        r = p.get("relative_at_choice")
        lines.append(
            f"{indent}| {p['name']} | {pref['batch_size']} @ {pref['freq_mhz']:g} MHz | "
            f"{'-' if r is None else f'{r:.3f}'} | {100 * p['regret']:+.1f}% |"
        )
    worst = max(block["proxies"], key=lambda p: p["regret"])
    lines += [
        "",
        f"{indent}worst regret {100 * worst['regret']:+.1f}% ({worst['name']}): if the target "
        "scales like that proxy, training takes that much longer than that proxy's fastest "
        "choice",
    ]
    if n == 2:
        lines.append(
            f"{indent}note: the median of two proxies is their mean, so one bad proxy still "
            "moves the choice; give at least three"
        )
    return lines
