"""The target data of `undercap train`: the --dataset flags, or the data of the `run`
its selection came from, with the data flags given on the command line in its place."""

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, Optional

# The data flags (their dests) `train --from-selection` honours over the selection's own
# data (a selection made on a server and copied to a board points at the server's files).
DATA_FLAGS = ("data_dir", "input_shape", "context", "limit", "task")


def data_spec(
    args: argparse.Namespace, model: str, selection_data: Optional[Dict[str, Any]]
) -> Any:
    """The --dataset flags, else the data the selection's run trained on with any data
    flag given on the command line in place of the selection's; says which it uses."""
    from undercap.data.spec import DataSpec
    from undercap.errors import UndercapError
    from undercap.models import model_spec

    if args.dataset is not None:
        shape_ = args.input_shape
        spec = model_spec(model)
        if shape_ is None and not spec.is_sequence:
            shape_ = spec.default_input_shape
        return DataSpec(
            args.dataset,
            data_dir=args.data_dir,
            input_shape=shape_,
            context=args.context or DataSpec.context,
            limit=args.limit,
            task=args.task,
        )
    if not selection_data:
        raise UndercapError("--dataset is required (or a selection written by `run`)")
    d = dict(selection_data)
    d["input_shape"] = tuple(d["input_shape"]) if d.get("input_shape") else None
    given = {k: getattr(args, k) for k in DATA_FLAGS if getattr(args, k) is not None}
    d.update(given)
    data = DataSpec(**d)
    if data.data_dir is not None and not Path(data.data_dir).is_dir():
        raise UndercapError(
            f"the selection's data folder {data.data_dir} does not exist here: "
            "pass --data-dir DIR (where the target data is on this machine)"
        )
    where = f" under {Path(data.data_dir).resolve()}" if data.data_dir else ""
    flags = ", ".join("--" + k.replace("_", "-") for k in given)
    how = f"{flags} from the command line" if given else "all from the selection"
    print(f"data: {data.label}{where} ({how})", file=sys.stderr)
    return data
