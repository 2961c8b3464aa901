"""Models: shapes, parameter counts, measured workloads, causality, weight files."""

import importlib.util
from typing import List, Tuple

import pytest
import torch
from torch import nn

from undercap.errors import ArtifactError, UndercapError
from undercap.models import (
    MODEL_NAMES,
    build_model,
    load_weights,
    model_spec,
    save_weights,
    workload_of,
)
from undercap.models.flops import HAS_DISPATCH_MODE
from undercap.models.transformer import CharTransformer

VOCAB = 97


def _batch(name: str, shape: Tuple[int, ...], n: int = 2, classes: int = 10):
    if name == "char-transformer":
        return torch.randint(0, classes, (n, *shape)), torch.randint(0, classes, (n, *shape))
    return torch.randn(n, *shape), torch.randint(0, classes, (n,))


@pytest.mark.parametrize(
    "name,shape,classes",
    [
        ("small-cnn", (1, 8, 8), 10),
        ("small-cnn", (3, 32, 32), 7),
        ("resnet18", (3, 32, 32), 10),
        ("resnet18", (1, 8, 8), 5),
        ("mobilenetv2", (3, 32, 32), 100),
        ("char-transformer", (16,), VOCAB),
    ],
)
def test_forward_backward_shapes(name: str, shape: Tuple[int, ...], classes: int) -> None:
    torch.manual_seed(0)
    model = build_model(name, num_classes=classes, input_shape=shape)
    x, y = _batch(name, shape, classes=classes)
    out = model(x)
    expected = (2, shape[0], classes) if name == "char-transformer" else (2, classes)
    assert tuple(out.shape) == expected
    nn.functional.cross_entropy(out.reshape(-1, classes), y.reshape(-1)).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_parameter_counts() -> None:
    # ResNet18-CIFAR with 10 classes: the widely quoted 11,173,962 parameters.
    assert _count(build_model("resnet18", num_classes=10, input_shape=(3, 32, 32))) == 11_173_962
    mb = _count(build_model("mobilenetv2", num_classes=10, input_shape=(3, 32, 32)))
    assert 2_200_000 <= mb <= 2_300_000
    # transformer: count from the architecture description, independently of the code
    d, ctx, heads, layers, inner = 256, 64, 6, 6, 6 * (256 // 6)
    block = 2 * 2 * d + (d * 3 * inner + 3 * inner) + (inner * d + d)
    block += (d * 4 * d + 4 * d) + (4 * d * d + d)
    expected = VOCAB * d + ctx * d + layers * block + 2 * d + (d * VOCAB + VOCAB)
    model = build_model("char-transformer", num_classes=VOCAB, input_shape=(ctx,))
    assert _count(model) == expected
    assert heads * model.blocks[0].attn.head_dim == inner == 252


def _forward_flops_by_hand(model: nn.Module, x: torch.Tensor) -> Tuple[float, float]:
    """Forward FLOPs of convs/linears from module hooks (2 per multiply-add), and the
    first conv's, whose input needs no gradient."""
    flops: List[float] = []

    def hook(m: nn.Module, inp: Tuple[torch.Tensor], out: torch.Tensor) -> None:
        if isinstance(m, nn.Conv2d):
            k = m.kernel_size[0] * m.kernel_size[1] * m.in_channels // m.groups
            flops.append(2.0 * out.numel() * k)
        elif isinstance(m, nn.Linear):
            flops.append(2.0 * out.numel() * m.in_features)

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    with torch.no_grad():
        model.eval()(x)
    for h in handles:
        h.remove()
    return sum(flops) / x.shape[0], flops[0] / x.shape[0]


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2"])
def test_workload_flops_match_layer_arithmetic(name: str) -> None:
    model = build_model(name, num_classes=10, input_shape=(3, 32, 32))
    fwd, first = _forward_flops_by_hand(model, torch.randn(1, 3, 32, 32))
    wl = workload_of(model, name, (3, 32, 32))
    # backward = grad-input + grad-weight, each as costly as the forward, except that
    # the first layer needs no grad-input (the image does not require grad)
    assert wl.flops_per_sample == pytest.approx(3 * fwd - first, rel=1e-6)
    if name == "resnet18":
        assert fwd == pytest.approx(1.11e9, rel=0.01)  # ~0.56 GMACs forward
        assert 1_000_000 < wl.activation_bytes_per_sample < 20_000_000
        assert 150 < wl.kernels_per_step < 600
    else:  # depthwise backward must count groups: ~0.53 GFLOPs, not ~7 GFLOPs
        assert 0.4e9 < wl.flops_per_sample < 0.7e9
    assert wl.param_count == _count(model)
    assert wl.traffic_bytes_per_sample > 2 * wl.activation_bytes_per_sample
    assert workload_of(model, name, (3, 32, 32)) is wl  # cached


def test_workload_transformer_counts_attention() -> None:
    ctx = 32
    model = build_model("char-transformer", num_classes=VOCAB, input_shape=(ctx,))
    wl = workload_of(model, "char-transformer", (ctx,))
    matmul_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    dense = 3 * 2 * matmul_params * ctx  # fwd + bwd of every linear layer, per token
    # QK^T and AV (2 FLOPs per multiply-add), 6 heads x 6 layers, fwd + 2x bwd
    attention = 3 * 6 * 6 * 2 * (2 * ctx * ctx * 42)
    assert wl.flops_per_sample == pytest.approx(dense + attention, rel=0.01)
    assert wl.input_shape == (ctx,)
    assert wl.activation_bytes_per_sample > 0


def test_activation_bytes_scale_with_pixels() -> None:
    small = workload_of(
        build_model("small-cnn", num_classes=10, input_shape=(1, 16, 16)), "small-cnn", (1, 16, 16)
    )
    large = workload_of(
        build_model("small-cnn", num_classes=10, input_shape=(1, 32, 32)), "small-cnn", (1, 32, 32)
    )
    assert large.activation_bytes_per_sample / small.activation_bytes_per_sample == pytest.approx(
        4.0, rel=0.05
    )
    assert large.flops_per_sample / small.flops_per_sample == pytest.approx(4.0, rel=0.05)
    assert large.kernels_per_step == small.kernels_per_step
    assert large.param_count == small.param_count


def test_transformer_is_causal() -> None:
    torch.manual_seed(0)
    model = CharTransformer(vocab_size=VOCAB, context=32, n_layers=2).eval()
    x = torch.randint(0, VOCAB, (1, 32))
    x2 = x.clone()
    x2[0, 20] = (x[0, 20] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(x), model(x2)
    assert torch.allclose(a[:, :20], b[:, :20], atol=1e-6)
    assert not torch.allclose(a[:, 20:], b[:, 20:])
    with torch.no_grad():
        assert model(x[:, :10]).shape == (1, 10, VOCAB)  # shorter than the context
    with pytest.raises(ValueError):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_registry() -> None:
    assert MODEL_NAMES == ("small-cnn", "resnet18", "mobilenetv2", "char-transformer")
    assert model_spec("resnet18").default_input_shape == (3, 32, 32)
    assert model_spec("char-transformer").default_input_shape == (64,)
    assert model_spec("char-transformer").optimizer == "adamw"
    assert {model_spec(n).optimizer for n in MODEL_NAMES[:3]} == {"adam"}
    assert model_spec("resnet18").base_lr == 1e-3
    assert 0 < model_spec("char-transformer").base_lr <= 1e-3
    assert model_spec("char-transformer").is_sequence and not model_spec("resnet18").is_sequence
    # the vocabulary the registry profiles next-token models with is the text loader's
    from undercap.data.text import VOCAB_SIZE

    assert model_spec("char-transformer").profile_classes() == VOCAB_SIZE
    with pytest.raises(UndercapError, match="unknown model"):
        build_model("vgg", num_classes=10, input_shape=(3, 32, 32))
    with pytest.raises(UndercapError, match="input_shape"):
        build_model("resnet18", num_classes=10, input_shape=(64,))


def test_weights_round_trip(tmp_path) -> None:
    torch.manual_seed(0)
    a = build_model("small-cnn", num_classes=10, input_shape=(1, 8, 8))
    a.features[0][1].running_mean.fill_(0.5)  # buffers travel too
    path = save_weights(a, tmp_path / "sub" / "w.pt", {"dataset": "digits", "epochs": 3})
    b = build_model("small-cnn", num_classes=10, input_shape=(1, 8, 8))
    meta = load_weights(b, path)
    assert meta == {"dataset": "digits", "epochs": 3, "fresh_tensors": []}
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(a.eval()(x), b.eval()(x))
    assert not list(tmp_path.joinpath("sub").glob("*.tmp"))  # atomic write left no temp file


def test_weights_head_mismatch_left_fresh(tmp_path) -> None:
    torch.manual_seed(0)
    a = build_model("resnet18", num_classes=10, input_shape=(3, 32, 32))
    save_weights(a, tmp_path / "w.pt", {})
    b = build_model("resnet18", num_classes=100, input_shape=(3, 32, 32))
    head_before = b.head.weight.clone()
    meta = load_weights(b, tmp_path / "w.pt")
    assert meta["fresh_tensors"] == ["head.bias", "head.weight"]
    assert torch.equal(b.head.weight, head_before)
    assert torch.equal(b.stem[0].weight, a.stem[0].weight)
    assert torch.equal(b.stages[3][1].conv2.weight, a.stages[3][1].conv2.weight)


def test_weights_transformer_vocab_mismatch(tmp_path) -> None:
    a = CharTransformer(vocab_size=VOCAB, context=16, n_layers=1)
    save_weights(a, tmp_path / "t.pt", {})
    b = CharTransformer(vocab_size=50, context=16, n_layers=1)
    meta = load_weights(b, tmp_path / "t.pt")
    assert meta["fresh_tensors"] == ["head.bias", "head.weight", "tok_emb.weight"]
    c = CharTransformer(vocab_size=VOCAB, context=32, n_layers=1)  # other context: not a head
    with pytest.raises(ArtifactError, match="pos_emb"):
        load_weights(c, tmp_path / "t.pt")


def test_weights_wrong_files(tmp_path) -> None:
    res = build_model("resnet18", num_classes=10, input_shape=(3, 32, 32))
    save_weights(res, tmp_path / "res.pt", {})
    mob = build_model("mobilenetv2", num_classes=10, input_shape=(3, 32, 32))
    with pytest.raises(ArtifactError, match="ResNet18 weights, not MobileNetV2"):
        load_weights(mob, tmp_path / "res.pt")
    gray = build_model("resnet18", num_classes=10, input_shape=(1, 32, 32))
    with pytest.raises(ArtifactError, match="stem.0.weight"):
        load_weights(gray, tmp_path / "res.pt")
    with pytest.raises(ArtifactError, match="does not exist"):
        load_weights(res, tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ArtifactError, match="not a readable weights file"):
        load_weights(res, tmp_path / "junk.pt")
    # a plain state dict of another architecture: keys differ
    small = build_model("small-cnn", num_classes=10, input_shape=(3, 32, 32))
    torch.save(small.state_dict(), tmp_path / "plain.pt")
    with pytest.raises(ArtifactError, match="does not match the ResNet18"):
        load_weights(res, tmp_path / "plain.pt")
    assert load_weights(small, tmp_path / "plain.pt") == {"fresh_tensors": []}


def test_small_cnn_learns_digits() -> None:
    from undercap.data import load_dataset
    from undercap.train.loop import LoopConfig, Trainer

    data = load_dataset("digits")
    torch.manual_seed(0)
    model = build_model("small-cnn", num_classes=data.num_classes, input_shape=data.input_shape)
    cfg = LoopConfig(
        batch_size=32,
        lr=model_spec("small-cnn").base_lr,
        target_accuracy=0.9,
        max_samples=8000,
        eval_every_samples=500,
    )
    result = Trainer(model, data, cfg).run()
    assert result.reached and result.final_accuracy >= 0.9


# torch.utils.flop_counter's totals for one forward + backward at batch 2 below, measured
# with torch 2.13: what the fallback must match on a torch that lacks the native counter.
NATIVE_FLOPS = {
    "small-cnn": 5_463_552,
    "mobilenetv2": 1_052_178_432,
    "char-transformer": 915_308_544,
}


@pytest.mark.skipif(not HAS_DISPATCH_MODE, reason="torch < 1.13: legacy_counts.py counts")
@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [
        ("small-cnn", (1, 8, 8), 10),
        ("mobilenetv2", (3, 32, 32), 10),
        ("char-transformer", (16,), 97),
    ],
)
def test_torch_2_0_flop_fallback_counts_what_flop_counter_counts(name, shape, classes) -> None:
    """JetPack 5's torch 2.0 has no torch.utils.flop_counter: the fallback counts the
    same FLOPs (matmuls, convolutions with the grouped-backward fix, attention). Where
    torch has the native counter both run side by side; on torch 2.0 itself the fallback
    is the default and must give the native counter's recorded totals."""
    import torch.nn.functional as F

    from undercap.models.flops import FallbackFlopCounter, flop_counter

    native = importlib.util.find_spec("torch.utils.flop_counter") is not None  # not on 2.0
    model = build_model(name, num_classes=classes, input_shape=shape)
    totals = []
    for fallback in (False, True):
        gen = torch.Generator().manual_seed(0)
        seq = len(shape) == 1
        x = torch.randint(0, classes, (2, *shape), generator=gen) if seq else torch.randn(2, *shape)
        y = torch.randint(0, classes, (2, *shape) if seq else (2,), generator=gen)
        counter = flop_counter(force_fallback=fallback)
        assert isinstance(counter, FallbackFlopCounter) == (fallback or not native)
        with counter:
            out = model(x)
            F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        totals.append(counter.get_total_flops())
    assert totals[0] == totals[1] == NATIVE_FLOPS[name]


def test_counting_a_workload_leaves_the_global_generator_as_it_was(monkeypatch):
    """The counting steps run the model in training mode (dropout draws): the run that
    asked, seeded already, must not train on a stream the first count of a model in a
    process shifted (later counts come from the cache and draw nothing)."""
    from undercap.models import workload as W

    monkeypatch.setattr(W, "_cache", {})
    model = build_model("char-transformer", num_classes=VOCAB, input_shape=(16,))
    torch.manual_seed(3)
    before = torch.get_rng_state()
    workload_of(model, "char-transformer", (16,))
    assert torch.equal(torch.get_rng_state(), before)
