"""The one place figures are made and saved (run curves, the demo plot, the comparison plot): a headless
matplotlib backend, a tight layout, the file written, the figure closed.

    fig, ax = figure(7, 4); ax.plot(...); save(fig, "curves.png")
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on training machines
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def figure(width: float, height: float, ncols: int = 1):
    """-> (figure, axes): one axis, or a list of `ncols` axes side by side."""
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
    return fig, (axes[0][0] if ncols == 1 else list(axes[0]))


def save(fig, out: str | Path, dpi: int = 100) -> Path:
    """Write `fig` to `out` (PNG by its suffix), close it, return the path."""
    out = Path(out)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
