"""report.plot_profile: the paper's Figure 1 from a profile, written atomically."""

from __future__ import annotations

import pytest
from select_helpers import figure1_profile

from undercap.report.figures import plot_profile
from undercap.select import baseline1, safe_freq_mhz, select_ours

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_plot_profile_writes_a_png(tmp_path):
    p = figure1_profile()
    rel = {8: 0.5, 16: 0.6, 32: 0.8, 64: 1.0}
    choice = select_ours(p, rel, 5.5)
    base = baseline1(p, 5.5, safe_freq_mhz(p, 5.5), relative=rel)
    out = plot_profile(
        p, tmp_path / "fig" / "profile.png", power_limit_w=5.5, choice=choice, baseline=base
    )
    assert out == tmp_path / "fig" / "profile.png"
    data = out.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 10_000
    assert [f.name for f in out.parent.iterdir()] == ["profile.png"]  # no temp left

    import matplotlib.image

    img = matplotlib.image.imread(out)
    assert img.shape[0] > 200 and img.shape[1] > 300


def test_plot_profile_without_limit_or_marks(tmp_path):
    out = plot_profile(figure1_profile(simulated=False), tmp_path / "p.png")
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_failed_plot_keeps_the_old_file(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    target = tmp_path / "p.png"
    target.write_bytes(b"old")

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(Figure, "savefig", boom)
    with pytest.raises(RuntimeError):
        plot_profile(figure1_profile(), target, power_limit_w=5.0)
    assert target.read_bytes() == b"old"
    assert [f.name for f in tmp_path.iterdir()] == ["p.png"]
