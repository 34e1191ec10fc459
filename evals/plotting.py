"""The two things every figure of nosink.evals does: start a headless figure, save it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["figure", "require_matplotlib", "save"]


def require_matplotlib() -> None:
    """Check that matplotlib can be imported, before any work whose figures would need it.

    Raises:
        ImportError: naming the ``eval`` extra that installs it.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(
            'the figures need matplotlib, which the eval extra installs: pip install "nosink[eval]"'
        ) from None


def figure(rows: int = 1, cols: int = 1, **kwargs: Any) -> tuple[Any, Any]:
    """A matplotlib figure and axes on the headless Agg backend (no display needed).

    Raises:
        ImportError: without matplotlib, naming the ``eval`` extra.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, **kwargs)


def save(fig: Any, path: str | Path, rect: tuple[float, float, float, float] | None = None) -> Path:
    """Lay out, write (PNG or SVG by suffix, folders made) and close ``fig``; returns the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=rect)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
