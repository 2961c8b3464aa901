"""Progress bars (tqdm, on stderr): the one place they are made."""

import sys
from typing import Any, Optional, Tuple


class NoBar:
    """Stands in for a bar when progress is off: every call does nothing."""

    total: Optional[int] = None

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    set_postfix_str = set_postfix

    def close(self) -> None:
        pass


def bar(
    enabled: bool, *, desc: str, unit: str, total: Optional[int] = None, initial: int = 0
) -> Any:
    """A tqdm bar on stderr that disappears when done, or a NoBar when disabled."""
    if not enabled:
        return NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False, file=sys.stderr)


def sample_bar(total: int, desc: str, enabled: bool, initial: int = 0) -> Any:
    """A bar over training samples."""
    return bar(enabled, desc=desc, unit="sample", total=total, initial=initial)


def training_hooks(progress: Any) -> Tuple[Any, Any]:
    """(on_step, on_eval) hooks for train.loop.Trainer that advance a sample bar
    and show the latest accuracy."""

    def on_step(_trainer: Any, n: int) -> None:
        progress.update(n)

    def on_eval(_trainer: Any, point: Any) -> None:
        progress.set_postfix(acc=f"{point.accuracy:.3f}", refresh=False)

    return on_step, on_eval
