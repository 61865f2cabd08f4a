"""Text glyphs the wizard draws with: bars, sparklines, byte sizes, and theme colours.

Pure functions returning Rich ``Text`` so that a table cell or a ``Static`` can show them; the
colours come from the running app's theme (``Palette.from_app``) so every standard theme works.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from rich.text import Text

__all__ = [
    "Palette",
    "SPARK_CHARS",
    "fmt_bytes",
    "fmt_gib",
    "hbar",
    "rich_color",
    "resample",
    "sparkline",
    "stacked_bar",
    "vbar",
]

SPARK_CHARS = "▁▂▃▄▅▆▇█"
"""Eight heights, lowest first (the same ramp Textual's Sparkline uses)."""


@dataclass(frozen=True)
class Palette:
    """Theme colours for Rich text, as hex strings."""

    ok: str = "#4EBF71"
    warn: str = "#ffa62b"
    bad: str = "#ba3c5b"
    accent: str = "#0178D4"
    muted: str = "grey50"
    text: str = "#e0e0e0"

    @classmethod
    def from_app(cls, app: object) -> "Palette":
        """Colours of ``app``'s current theme (falls back to textual-dark's)."""
        variables: dict[str, str] = getattr(app, "theme_variables", None) or {}
        theme = getattr(app, "current_theme", None)

        def pick(name: str, default: str) -> str:
            value = getattr(theme, name, None) if theme is not None else None
            return rich_color(value or variables.get(name), default)

        return cls(
            ok=pick("success", cls.ok),
            warn=pick("warning", cls.warn),
            bad=pick("error", cls.bad),
            accent=pick("primary", cls.accent),
            text=pick("foreground", cls.text),
        )

    def level(self, fraction: float) -> str:
        """ok below 70 %, warn below 90 %, bad above: for memory and temperature fill."""
        if fraction >= 0.9:
            return self.bad
        if fraction >= 0.7:
            return self.warn
        return self.ok


GIB = 1024**3


def rich_color(value: Optional[str], default: str) -> str:
    """A Textual theme colour (``#ba3c5b``, ``ansi_red``) as a colour name Rich styles accept."""
    if not value:
        return default
    from textual.color import Color, ColorParseError

    try:
        rich = Color.parse(value).rich_color
    except ColorParseError:
        return default
    return rich.name if rich is not None and rich.name != "default" else default


def fmt_bytes(value: Optional[float]) -> str:
    """``12.3 GiB`` / ``512 MiB`` / ``—`` for unknown."""
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit in ("B", "KiB") else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover - loop always returns


def fmt_gib(value: Optional[float]) -> str:
    """Bytes as GiB with one decimal, no unit (for ``used/total`` pairs)."""
    return "—" if value is None else f"{value / GIB:.1f}"


def resample(values: Sequence[Optional[float]], window: int, width: int) -> list[Optional[float]]:
    """``values`` (newest last) right-aligned in a ``window`` of samples, averaged into ``width`` cells.

    Missing samples (None, or not yet taken) are left out of a cell's mean; an all-missing cell is None,
    so a history that has just started grows from the right edge.
    """
    width = max(width, 1)
    missing: list[Optional[float]] = [None] * max(window - len(values), 0)
    slots = missing + list(values)[-window:]
    cells: list[Optional[float]] = []
    for cell in range(width):
        chunk = [v for v in slots[cell * len(slots) // width:(cell + 1) * len(slots) // width] if v is not None]
        cells.append(sum(chunk) / len(chunk) if chunk else None)
    return cells


def sparkline(values: Sequence[Optional[float]], width: int, *, maximum: float = 100.0, style: str = "", window: Optional[int] = None) -> Text:
    """Block glyphs scaled to ``maximum``; gaps (None) are blank.

    With ``window`` the last ``window`` samples are squeezed into ``width`` cells (cell means);
    without it the last ``width`` values are drawn one per cell.
    """
    tail = resample(values, window, width) if window else list(values)[-width:]
    chars = []
    for value in tail:
        if value is None:
            chars.append(" ")
            continue
        ratio = 0.0 if maximum <= 0 else min(max(value / maximum, 0.0), 1.0)
        chars.append(SPARK_CHARS[min(int(ratio * len(SPARK_CHARS)), len(SPARK_CHARS) - 1)])
    return Text("".join(chars).rjust(width), style=style, no_wrap=True)


def vbar(fraction: Optional[float], palette: Palette) -> Text:
    """One cell showing a fill level (used per GPU in a node row); ``?`` when unknown."""
    if fraction is None:
        return Text("?", style=palette.muted)
    fraction = min(max(fraction, 0.0), 1.0)
    char = SPARK_CHARS[min(int(fraction * len(SPARK_CHARS)), len(SPARK_CHARS) - 1)]
    return Text(char, style=palette.level(fraction))


def hbar(fraction: Optional[float], width: int, palette: Palette) -> Text:
    """A horizontal bar ``██████░░░░`` of ``width`` cells coloured by its fill level."""
    if fraction is None:
        return Text("?" * width, style=palette.muted, no_wrap=True)
    fraction = min(max(fraction, 0.0), 1.0)
    full = round(fraction * width)
    text = Text(no_wrap=True)
    text.append("█" * full, style=palette.level(fraction))
    text.append("░" * (width - full), style=palette.muted)
    return text


def stacked_bar(parts: Iterable[tuple[float, str]], capacity: float, width: int, *, empty_style: str) -> Text:
    """Segments ``(bytes, style)`` laid end to end on a bar where ``capacity`` fills ``width`` cells.

    What overflows the capacity is cut at the bar's end and flagged with ``▶`` so a too-big estimate
    reads as "past the end" rather than silently filling the bar.
    """
    text = Text(no_wrap=True)
    if capacity <= 0:
        return Text("?" * width, style=empty_style, no_wrap=True)
    cells_used = 0
    consumed = 0.0
    total = 0.0
    for size, style in parts:
        total += max(size, 0.0)
        end_cells = min(round(total / capacity * width), width)
        count = max(end_cells - cells_used, 0)
        text.append("█" * count, style=style)
        cells_used += count
        consumed = total
    if consumed > capacity and width > 0:
        text = text[: width - 1]
        text.append("▶", style="bold")
        return text
    text.append("░" * max(width - cells_used, 0), style=empty_style)
    return text
