"""The datasets of the proxy-sensitivity matrix (benchmarks/matrix.py) and how each
one's N(b) is estimated; benchmarks/compare.py uses the same settings for the
datasets it shares, so both read the same cached estimate runs.

Every dataset is estimated ONCE (several seeds) and serves as proxy and as target.
Targets are absolute accuracies, chosen so that every batch size reaches them well
within the sample budget (see TARGETS_WHY and benchmarks/results/matrix/README.md):
the benchmark checks that every (b, seed) run reached its target and says so; a
batch size with a run cut off by the budget is left out of every cell of that
dataset (it would otherwise decide a ranking with a biased mean).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Modality:
    """What every dataset of one modality shares: model, input, batch sizes, budget,
    pre-training."""

    name: str
    model: str
    batch_sizes: tuple[int, ...]
    max_samples: int  # budget per estimate run
    input_shape: tuple[int, ...] | None  # images: every dataset mapped to this shape
    context: int  # text: characters per window
    pretrain: str | None  # None: every run starts from the same seeded random init
    pretrain_samples: int
    pretrain_limit: int | None


@dataclass(frozen=True)
class Dataset:
    name: str  # short label in tables and figures
    modality: str
    spec: str  # a data spec (undercap.data)
    target_accuracy: float
    limit: int | None  # training samples kept (class-balanced images, spread windows)
    eval_every: int  # evaluation cadence in training samples: N(b)'s resolution
    eval_max: int | None  # evaluate on this many test samples (None: the whole split)
    needs: tuple[str, ...]  # files under the data folder

    @property
    def uses_data_dir(self) -> bool:
        return bool(self.needs)


WIKITEXT = "text:text/wikitext2-valid.txt+text/wikitext2-test.txt"
AUSTEN = "text/austen-emma.txt+text/austen-persuasion.txt+text/austen-sense.txt"
# chesterton-ball.txt is not UTF-8 (Latin-1 bytes, e.g. "Bruneti\\xe8re" at byte 227337), which
# the text loader rejects by design; the other two books make the Chesterton set.
CHESTERTON = "text/chesterton-brown.txt+text/chesterton-thursday.txt"

MODALITIES = {
    "text": Modality(
        name="text",
        model="char-transformer",
        batch_sizes=(16, 32, 64, 128),
        max_samples=12_000,
        input_shape=None,
        context=32,
        pretrain=WIKITEXT,  # not a matrix dataset
        pretrain_samples=12_000,
        pretrain_limit=40_000,
    ),
    "image": Modality(
        name="image",
        model="small-cnn",
        batch_sizes=(16, 32, 64, 128, 256),
        max_samples=40_000,
        input_shape=(3, 32, 32),
        context=32,
        # A seeded random init: weights pre-trained on the other CIFAR-10 quarter sit at
        # the CIFAR plateau already, leaving nothing for N(b) to measure there (tried in
        # benchmarks/compare.py); the shared data has no other image set.
        pretrain=None,
        pretrain_samples=0,
        pretrain_limit=None,
    ),
}


def _text(name: str, files: str, target: float) -> Dataset:
    # 9000 train / 1000 test windows of 32 characters spread over the corpus; evaluate
    # on 300 of the test windows (9600 characters, the same ones for every run) every
    # 256 samples (8 steps of b=32): N(b) of 1500-6500 samples is resolved to 4-17%.
    # Evaluation is half the cost of a text run on a CPU: 300 windows keep the whole
    # matrix under an hour on 2 cores.
    return Dataset(name, "text", "text:" + files, target, 9_000, 256, 300, tuple(files.split("+")))


def _image(name: str, file: str, target: float) -> Dataset:
    # 4000 train / 1000 test images, class-balanced, as 3x32x32; 500 test images
    return Dataset(name, "image", "npz:" + file, target, 4_000, 512, 500, (file,))


DATASETS = {
    d.name: d
    for d in (
        _text("shakespeare", "text/tinyshakespeare.txt", 0.36),
        _text("austen", AUSTEN, 0.37),
        _text("chesterton", CHESTERTON, 0.355),
        _text("milton", "text/milton-paradise.txt", 0.37),
        _text("whitman", "text/whitman-leaves.txt", 0.385),
        _image("cifar-a", "images/cifar10-quarter-a.npz", 0.40),
        _image("cifar-b", "images/cifar10-quarter-b.npz", 0.40),
        _image("mnist", "images/mnist-train.npz", 0.90),
        # scikit-learn's 8x8 digits, bundled: 1438 train / 359 test images, as 3x32x32
        Dataset("digits", "image", "digits", 0.90, None, 256, None, ()),
    )
}


def data_spec(ds: Dataset, data_dir: Path):  # type: ignore[no-untyped-def]
    from undercap.data.spec import DataSpec

    mod = MODALITIES[ds.modality]
    return DataSpec(
        ds.spec,
        data_dir=str(data_dir) if ds.uses_data_dir else None,
        input_shape=mod.input_shape,
        context=mod.context,
        limit=ds.limit,
    )


def pretrain_spec(mod: Modality, data_dir: Path):  # type: ignore[no-untyped-def]
    from undercap.data.spec import DataSpec

    if mod.pretrain is None:
        return None
    return DataSpec(mod.pretrain, data_dir=str(data_dir), context=mod.context,
                    limit=mod.pretrain_limit)  # fmt: skip


def training_setup(ds: Dataset, pretrained: str | None, torch_device: str = "cpu", jobs: int = 1):  # type: ignore[no-untyped-def]
    from undercap.recipes.common import TrainingSetup

    mod = MODALITIES[ds.modality]
    return TrainingSetup(
        model=mod.model, batch_sizes=mod.batch_sizes, max_samples=mod.max_samples,
        eval_every_samples=ds.eval_every, eval_max_samples=ds.eval_max,
        pretrained=pretrained, torch_device=torch_device, jobs=jobs,
    )  # fmt: skip


def pretrained_weights(mod: Modality, data_dir: Path, cache, progress: bool = False):  # type: ignore[no-untyped-def]
    """The cached weights every run of `mod` starts from (None: random init)."""
    from undercap.recipes.common import TrainingSetup, with_pretrained

    src = pretrain_spec(mod, data_dir)
    if src is None:
        return None
    setup = TrainingSetup(model=mod.model, batch_sizes=mod.batch_sizes,
                          max_samples=mod.max_samples, eval_every_samples=1, torch_device="cpu")  # fmt: skip
    return with_pretrained(setup, src, max_samples=mod.pretrain_samples, cache=cache,
                           progress=progress).pretrained  # fmt: skip


def estimate_config(ds: Dataset, data_dir: Path, pretrained: str | None, seeds, target=None):  # type: ignore[no-untyped-def]
    from undercap.estimate import EstimateConfig

    mod = MODALITIES[ds.modality]
    return EstimateConfig(
        model=mod.model, data=data_spec(ds, data_dir), batch_sizes=mod.batch_sizes,
        seeds=tuple(seeds), target_accuracy=ds.target_accuracy if target is None else target,
        max_samples=mod.max_samples, eval_every_samples=ds.eval_every,
        eval_max_samples=ds.eval_max, pretrained=pretrained,
    )  # fmt: skip
