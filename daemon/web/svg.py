"""Charts drawn on the server as inline SVG: the timeline, stacked bars, lines and bars.

No chart library and no script: each function returns markup a template drops in as is.
Every text that comes from the stores is escaped here (it is data, never markup); a mark
that opens something is a link, and every shape has a `<title>` the browser shows on hover.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from daemon.web.views.now import Timeline

# One colour per series, in order (context layers, memory kinds); chosen to stay apart.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip
BAND_COLOURS = {
    "awake": "#d8ecd2",
    "winding-down": "#f7e0b5",
    "asleep": "#c9d3ee",
    "off": "#e3e6ea",
    "unknown": "#ffffff",
}
# What the legend calls each band.
BAND_LABELS = {"off": "off (not running)", "unknown": "no record"}
MARK_ROWS = ("turn", "fork", "schedule", "sleep")
# A line chart marks each of its points with a dot up to this many points.
MAX_DOTS = 90
MARK_LABELS = {"turn": "turns", "fork": "forks", "schedule": "scheduled", "sleep": "sleep cycles"}


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _svg(width: int, height: int, body: list[str], label: str) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" role="img"'
        f' aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def _legend(names: Sequence[str], *, x: float, y: float, colours: Callable[[int], str]) -> str:
    parts = []
    cx = x
    for i, name in enumerate(names):
        parts.append(
            f'<rect x="{_num(cx)}" y="{_num(y - 9)}" width="10" height="10" fill="{colours(i)}"/>'
            f'<text x="{_num(cx + 14)}" y="{_num(y)}" class="legend">{escape(name)}</text>'
        )
        cx += 22 + 7 * len(name)
    return "".join(parts)


def timeline(
    tl: Timeline, *, width: int = 1000, link: Callable[[str, str], str] | None = None
) -> Markup:
    """State bands over the window, then one row each of turns, forks, scheduled items, sleep."""
    left, right, top, band_h, row_h = 90, 10, 24, 26, 20
    span = (tl.end - tl.start).total_seconds() or 1.0
    inner = width - left - right

    def x(at: datetime) -> float:
        return left + inner * min(max((at - tl.start).total_seconds() / span, 0.0), 1.0)

    height = top + band_h + row_h * len(MARK_ROWS) + 30
    body = [
        '<defs><pattern id="no-record" width="6" height="6" patternUnits="userSpaceOnUse"'
        ' patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#c4c8cf" stroke-width="2"/></pattern></defs>',
        f'<text x="4" y="{top + 17}" class="row">state</text>',
    ]
    for band in tl.bands:
        x0, x1 = x(band.start), x(band.end)
        until = (
            f"{band.end:%H:%M}"
            if band.end.date() == band.start.date()
            else f"{band.end:%Y-%m-%d %H:%M}"
        )
        note = f" · {band.note}" if band.note else ""
        # A time with no record is hatched: neither running nor off is known.
        fill = (
            "url(#no-record)" if band.state == "unknown" else BAND_COLOURS.get(band.state, "#eee")
        )
        body.append(
            f'<rect class="band band-{band.state}" x="{_num(x0)}" y="{top}" width="{_num(max(x1 - x0, 0.5))}"'
            f' height="{band_h}" fill="{fill}">'
            f"<title>{escape(BAND_LABELS.get(band.state, band.state))} {band.start:%Y-%m-%d %H:%M}"
            f" → {until}{escape(note)}</title></rect>"
        )
    # Day boundaries (UTC midnight) and the present moment.
    day = tl.start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    axis_y = top + band_h + row_h * len(MARK_ROWS) + 14
    while day < tl.end:
        dx = _num(x(day))
        body.append(
            f'<line x1="{dx}" x2="{dx}" y1="{top - 4}" y2="{axis_y - 10}" class="grid"/>'
            f'<text x="{dx}" y="{axis_y}" class="axis" text-anchor="middle">{day:%a %d %b}</text>'
        )
        day += timedelta(days=1)
    nx = _num(x(tl.now))
    body.append(
        f'<line x1="{nx}" x2="{nx}" y1="{top - 8}" y2="{axis_y - 10}" class="now"/>'
        f'<text x="{nx}" y="{top - 10}" class="axis" text-anchor="middle">now</text>'
    )
    for r, kind in enumerate(MARK_ROWS):
        y = top + band_h + row_h * r + 4
        body.append(f'<text x="4" y="{y + 12}" class="row">{MARK_LABELS[kind]}</text>')
        for mark in (m for m in tl.marks if m.kind == kind):
            x0 = x(mark.at)
            title = f"<title>{escape(mark.label)} · {mark.at:%Y-%m-%d %H:%M}</title>"
            if mark.end is not None:
                w = max(x(mark.end) - x0, 3.0)
                shape = (
                    f'<rect class="mark mark-{kind}" x="{_num(x0)}" y="{y + 2}" width="{_num(w)}"'
                    f' height="{row_h - 8}" rx="2">{title}</rect>'
                )
            elif kind == "schedule":
                cy = y + row_h / 2 - 2
                shape = (
                    f'<path class="mark mark-{kind}" d="M{_num(x0)} {_num(cy - 6)} l6 6 l-6 6 l-6 -6 z">'
                    f"{title}</path>"
                )
            else:
                shape = (
                    f'<rect class="mark mark-{kind}" x="{_num(x0 - 1.5)}" y="{y}" width="3"'
                    f' height="{row_h - 4}">{title}</rect>'
                )
            href = link(kind, mark.ref) if link is not None and mark.ref else ""
            body.append(f'<a href="{escape(href)}">{shape}</a>' if href else shape)
    shown = [b for b in BAND_COLOURS if b != "unknown" or any(t.state == b for t in tl.bands)]
    body.append(
        _legend(
            [BAND_LABELS.get(b, b) for b in shown],
            x=left,
            y=14,
            colours=lambda i: (
                "url(#no-record)" if shown[i] == "unknown" else BAND_COLOURS[shown[i]]
            ),
        )
    )
    return _svg(width, height, body, "timeline of the last days")


def stacked_bars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    width: int = 1000,
    height: int = 260,
    links: Sequence[str] | None = None,
    unit: str = "tokens",
    label: str = "stacked bars",
    chosen: int | None = None,
) -> Markup:
    """One bar per label, stacked by series (in the order given); a bar links where `links`
    says, and the `chosen` one is outlined."""
    left, bottom, top = 56, 24, 26
    names = [n for n in series if any(series[n])]
    totals = [sum(series[n][i] for n in names) for i in range(len(labels))]
    inner_h = height - top - bottom
    step = (width - left - 10) / max(len(labels), 1)
    bar_w = max(min(step * 0.7, 48), 2)
    high, body = _y_axis(
        max(totals, default=0), left=left, top=top, inner_h=inner_h, width=width, unit=unit,
        integer=True,
    )  # fmt: skip
    for i, name in enumerate(labels):
        x = left + step * i + (step - bar_w) / 2
        y = float(top + inner_h)
        parts = []
        for key in names:
            value = series[key][i]
            if not value:
                continue
            h = inner_h * value / high
            y -= h
            parts.append(
                f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(bar_w)}" height="{_num(h)}"'
                f' fill="{colour(list(series).index(key))}"><title>{escape(name)} · {escape(key)}:'
                f" {value:,.0f} {unit}</title></rect>"
            )
        mark = " chosen" if i == chosen else ""
        group = f'<g class="bar{mark}" data-label="{escape(name)}">{"".join(parts)}</g>'
        if links is not None:
            group = f'<a href="{escape(links[i])}">{group}</a>'
        body.append(group)
    body.append(
        _legend(
            names,
            x=_legend_x(left, unit),
            y=14,
            colours=lambda i: colour(list(series).index(names[i])),
        )
    )
    return _svg(width, height, body, label)


def bars(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    width: int = 1000,
    height: int = 200,
    unit: str = "",
    fmt: str = "{:,.2f}",
    label: str = "bars",
    integer: bool = False,
    ticks: Sequence[str] | None = None,
) -> Markup:
    """One bar per label, labelled under the bars (every few when they are many).

    `ticks` are the labels written under the bars (the labels themselves when not given);
    with a dozen bars or fewer each carries its value above it, so a few bars read at once.
    """
    left, bottom, top = 56, 28, 24
    inner_h = height - top - bottom
    step = (width - left - 10) / max(len(labels), 1)
    bar_w = max(min(step * 0.7, 48), 2)
    every = max(1, int(60 / step) + 1)
    high, body = _y_axis(
        max(values, default=0), left=left, top=top, inner_h=inner_h, width=width, unit=unit,
        integer=integer,
    )  # fmt: skip
    under = list(ticks) if ticks is not None else list(labels)
    for i, (name, value) in enumerate(zip(labels, values, strict=True)):
        x = left + step * i + (step - bar_w) / 2
        h = inner_h * value / high
        said = fmt.format(value)
        body.append(
            f'<rect x="{_num(x)}" y="{_num(top + inner_h - h)}" width="{_num(bar_w)}" height="{_num(h)}"'
            f' fill="{PALETTE[0]}"><title>{escape(name)}: {escape(said)} {escape(unit)}</title></rect>'
        )
        if len(labels) <= 12:
            body.append(
                f'<text x="{_num(x + bar_w / 2)}" y="{_num(top + inner_h - h - 4)}" class="axis value"'
                f' text-anchor="middle">{escape(said)}</text>'
            )
        if i % every == 0:
            body.append(
                f'<text x="{_num(x + bar_w / 2)}" y="{height - 8}" class="axis" text-anchor="middle">'
                f"{escape(under[i])}</text>"
            )
    return _svg(width, height, body, label)


def lines(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    width: int = 1000,
    height: int = 240,
    unit: str = "",
    label: str = "lines",
    integer: bool = False,
) -> Markup:
    """One line per series over the labels (dates), with a legend."""
    left, bottom, top = 56, 28, 26
    peak = max((max(v, default=0) for v in series.values()), default=0)
    inner_h = height - top - bottom
    n = len(labels)
    step = (width - left - 10) / max(n - 1, 1)
    high, body = _y_axis(
        peak, left=left, top=top, inner_h=inner_h, width=width, unit=unit, integer=integer
    )
    names = list(series)
    for s, name in enumerate(names):
        points = " ".join(
            f"{_num(left + step * i)},{_num(top + inner_h - inner_h * v / high)}"
            for i, v in enumerate(series[name])
        )
        body.append(
            f'<polyline points="{points}" fill="none" stroke="{colour(s)}" stroke-width="2">'
            f"<title>{escape(name)}: {series[name][-1] if series[name] else 0:,.0f}</title></polyline>"
        )
        # A dot on each point, to hover for its value — while they are few enough to tell
        # apart (a year of days would be thousands of marks on a line that says it already).
        for i, v in enumerate(series[name] if n <= MAX_DOTS else ()):
            body.append(
                f'<circle cx="{_num(left + step * i)}" cy="{_num(top + inner_h - inner_h * v / high)}"'
                f' r="3" fill="{colour(s)}"><title>{escape(labels[i])} · {escape(name)}: {v:,.0f}</title></circle>'
            )
    every = max(1, int(n / 8) + 1)
    for i, day in enumerate(labels):
        if i % every == 0 or i == n - 1:
            # The first and last labels sit inside the chart, not half outside it.
            anchor = "start" if i == 0 else "end" if i == n - 1 else "middle"
            body.append(
                f'<text x="{_num(left + step * i)}" y="{height - 8}" class="axis" text-anchor="{anchor}">'
                f"{escape(day)}</text>"
            )
    body.append(_legend(names, x=_legend_x(left, unit), y=14, colours=colour))
    return _svg(width, height, body, label)


def _legend_x(left: int, unit: str) -> float:
    """Where a legend starts: after the unit's label at the top left."""
    return max(left, 16 + 7 * len(unit))


def nice_ticks(peak: float, *, count: int = 5, integer: bool = False) -> list[float]:
    """Axis ticks from 0 to just above `peak`, in steps of 1, 2 or 5 times a power of ten.

    At most `count` intervals; `integer` keeps the step whole (counts of things). A peak of
    nothing draws 0 to 1.
    """
    peak = peak if peak > 0 else 1.0
    raw = peak / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next((m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9)), 10 * power)
    if integer:
        step = max(step, 1.0)
    n = math.ceil(peak / step - 1e-9)
    return [round(i * step, 12) for i in range(n + 1)]


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """`value` with as many decimals as the ticks' step needs, and thousands separated."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{value:,.{decimals}f}"


def duration_unit(peak_seconds: float) -> tuple[str, float]:
    """The unit a chart of durations reads best in: (its name, seconds in one)."""
    if peak_seconds < 120:
        return "seconds", 1.0
    if peak_seconds < 120 * 60:
        return "minutes", 60.0
    return "hours", 3600.0


def _y_axis(
    peak: float,
    *,
    left: int,
    top: int,
    inner_h: float,
    width: int,
    unit: str,
    integer: bool = False,
) -> tuple[float, list[str]]:
    """Gridlines at nice values up to just above `peak`, labelled, with the unit on top.

    Returns the axis's top value (what a full-height mark is worth) and the markup.
    """
    ticks = nice_ticks(peak, integer=integer)
    high = ticks[-1]
    out = []
    for value in ticks:
        y = top + inner_h * (1 - value / high)
        out.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{_num(y)}" y2="{_num(y)}" class="grid"/>'
            f'<text x="{left - 4}" y="{_num(y + 4)}" class="axis tick" text-anchor="end">'
            f"{tick_label(value, ticks)}</text>"
        )
    if unit:
        out.append(f'<text x="4" y="{top - 14}" class="axis unit">{escape(unit)}</text>')
    return high, out
