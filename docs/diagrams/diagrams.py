"""The documentation's diagrams, as SVG: ``python docs/diagrams/diagrams.py`` rewrites them.

Each diagram is declared below as boxes on a grid and the arrows between them; the
functions at the top turn that into SVG. The output depends on nothing but this file (no
Graphviz, whose layout and output change between versions, and which a fresh machine does
not have), so ``tests/docs/test_diagrams.py`` can check that the checked-in ``*.svg`` files
are exactly what this script writes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path

HERE = Path(__file__).resolve().parent

FONT = "font-family='ui-sans-serif, system-ui, sans-serif'"
LINE_HEIGHT = 16
CHAR_WIDTH = 6.6  # average advance of the 12 px font, for box widths
PAD = 12


@dataclass(frozen=True)
class Box:
    """A box at (x, y) (its top-left corner), with a title line and smaller lines under it."""

    key: str
    x: float
    y: float
    title: str
    lines: tuple[str, ...] = ()
    fill: str = "#eef4fb"
    stroke: str = "#3b6ea5"
    width: float | None = None

    @property
    def w(self) -> float:
        if self.width is not None:
            return self.width
        longest = max(len(self.title) * 1.1, *(len(line) for line in self.lines))
        return round(longest * CHAR_WIDTH + 2 * PAD)

    @property
    def h(self) -> float:
        return LINE_HEIGHT * (1 + len(self.lines)) + PAD

    def anchor(self, side: str) -> tuple[float, float]:
        """The middle of a side: n, s, e, w; or "sw+N": N px right of the bottom-left."""
        if side.startswith("sw+"):
            return self.x + float(side[3:]), self.y + self.h
        if side.startswith("nw+"):
            return self.x + float(side[3:]), self.y
        return {
            "n": (self.x + self.w / 2, self.y),
            "s": (self.x + self.w / 2, self.y + self.h),
            "e": (self.x + self.w, self.y + self.h / 2),
            "w": (self.x, self.y + self.h / 2),
        }[side]


@dataclass(frozen=True)
class Arrow:
    """An arrow from one box's side to another's, through optional bends, with a label."""

    start: tuple[str, str]
    end: tuple[str, str]
    label: str = ""
    via: tuple[tuple[float, float], ...] = ()
    label_at: tuple[float, float] | None = None
    dashed: bool = False
    head: bool = True


def _box_svg(box: Box) -> list[str]:
    out = [
        f"<rect x='{box.x}' y='{box.y}' width='{box.w}' height='{box.h}' rx='6' "
        f"fill='{box.fill}' stroke='{box.stroke}' stroke-width='1.5'/>",
        f"<text x='{box.x + PAD}' y='{box.y + PAD + 9}' font-size='13' font-weight='bold' "
        f"fill='#1d2b3a'>{escape(box.title)}</text>",
    ]
    for i, line in enumerate(box.lines, start=1):
        out.append(
            f"<text x='{box.x + PAD}' y='{box.y + PAD + 9 + i * LINE_HEIGHT}' font-size='12' "
            f"fill='#33414f'>{escape(line)}</text>"
        )
    return out


def _arrow_svg(arrow: Arrow, boxes: dict[str, Box]) -> list[str]:
    x1, y1 = boxes[arrow.start[0]].anchor(arrow.start[1])
    x2, y2 = boxes[arrow.end[0]].anchor(arrow.end[1])
    points = [(x1, y1), *arrow.via, (x2, y2)]
    path = " ".join(f"{x:g},{y:g}" for x, y in points)
    dash = " stroke-dasharray='5,4'" if arrow.dashed else ""
    head = " marker-end='url(#head)'" if arrow.head else ""
    out = [
        f"<polyline points='{path}' fill='none' stroke='#4a5866' stroke-width='1.4'{dash}{head}/>"
    ]
    if arrow.label:
        lx, ly = arrow.label_at or (
            (points[0][0] + points[-1][0]) / 2 + 6,
            (points[0][1] + points[-1][1]) / 2,
        )
        for i, line in enumerate(arrow.label.split("\n")):
            out.append(
                f"<text x='{lx:g}' y='{ly + i * 14:g}' font-size='11.5' fill='#6b3f12'>"
                f"{escape(line)}</text>"
            )
    return out


def render(title: str, boxes: list[Box], arrows: list[Arrow], width: int, height: int) -> str:
    """The SVG document of a diagram (deterministic: the same input, the same bytes)."""
    by_key = {box.key: box for box in boxes}
    body = [
        "<?xml version='1.0' encoding='UTF-8'?>",
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' aria-label='{escape(title)}' {FONT}>",
        f"<title>{escape(title)}</title>",
        "<defs><marker id='head' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='8' "
        "markerHeight='8' orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' "
        "fill='#4a5866'/></marker></defs>",
        f"<rect width='{width}' height='{height}' fill='white'/>",
    ]
    for arrow in arrows:
        body += _arrow_svg(arrow, by_key)
    for box in boxes:
        body += _box_svg(box)
    body.append("</svg>")
    return "\n".join(body) + "\n"


# --------------------------------------------------------------------------- the diagrams


def worker_tree() -> str:
    """The task tree of a running Worker."""
    green, red = ("#eefaf0", "#3c8a4d"), ("#fdf0ee", "#b0503c")
    boxes = [
        Box("run", 20, 20, "await worker.run()",
            ("or async with worker: / await tg.start(worker.run)",)),
        Box("tg", 60, 100, "task group: the worker's whole life",
            ("nothing started inside outlives run()",)),
        Box("reserve", 100, 190, "reserve loop",
            ("take a CapacityLimiter token per free slot,",
             "then reserve min(max_jobs, free slots) jobs",
             "stops at shutdown(); a reserve in progress is cancelled")),
        Box("job", 100, 310, "one task per job",
            ("a token while the handler runs, then",
             "a settle slot for the ack or nack")),
        Box("scope", 140, 390, "the job's cancel scope",
            ("cancelled by a lost lease, job_timeout, drain_timeout",
             "or cancel_in_flight(): a flag set first decides the outcome")),
        Box("handler", 180, 490, "handler(payload, ctx)",
            ("async on the loop, or sync in a thread",), *green),
        Box("heartbeat", 480, 490, "heartbeat",
            ("extends the lease while the handler runs;",
             "cancels the scope if the lease is lost"), *green, width=300),
        Box("settle", 560, 302, "ack / nack",
            ("shielded from cancellation,", "bounded by a timeout"), *red),
    ]  # fmt: skip
    arrows = [
        Arrow(("run", "sw+20"), ("tg", "w"), via=((40, 123),)),
        Arrow(("tg", "sw+20"), ("reserve", "w"), via=((80, 223),)),
        Arrow(("tg", "sw+20"), ("job", "w"), via=((80, 330),)),
        Arrow(("reserve", "sw+160"), ("job", "nw+160"), "starts one per reserved job",
              label_at=(268, 292), dashed=True),
        Arrow(("job", "sw+20"), ("scope", "w"), via=((120, 415),)),
        Arrow(("scope", "sw+20"), ("handler", "w"), via=((160, 515),)),
        Arrow(("scope", "sw+20"), ("heartbeat", "n"), via=((160, 472), (630, 472))),
        Arrow(("job", "e"), ("settle", "w"), "then, outside the scope", label_at=(424, 322)),
    ]  # fmt: skip
    return render("The task tree of a sepp-anyio Worker", boxes, arrows, 860, 580)


def job_lifecycle() -> str:
    """A job's states on the server, and what moves it between them."""
    done, dead = ("#eefaf0", "#3c8a4d"), ("#fdf0ee", "#b0503c")
    boxes = [
        Box("new", 185, 14, "enqueue", ("scheduled_at in the future, or not",), width=250),
        Box("scheduled", 40, 130, "scheduled", ("waits for scheduled_at",), width=190),
        Box("ready", 330, 130, "ready", ("ordered: priority 9 first,", "then oldest first"),
            width=190),
        Box("leased", 330, 320, "leased (in flight)",
            ("held by one worker until", "lease_expires_at"), width=190),
        Box("deleted", 40, 510, "acked: deleted", ("its idempotency key is", "remembered"),
            *done, width=190),
        Box("dead", 620, 510, "dead-lettered",
            ("kept for dead_letter_retention_ms", "(drained, or replayed)"), *dead, width=220),
    ]  # fmt: skip
    arrows = [
        Arrow(("new", "sw+40"), ("scheduled", "n"), via=((225, 100), (135, 100))),
        Arrow(("new", "sw+210"), ("ready", "n"), via=((395, 100), (425, 100))),
        Arrow(("scheduled", "e"), ("ready", "w"), "its time comes", label_at=(240, 148)),
        Arrow(("ready", "s"), ("leased", "n"), "reserve", label_at=(432, 246)),
        Arrow(("leased", "w"), ("deleted", "nw+60"), "ack", via=((100, 352),), label_at=(200, 344)),
        Arrow(("leased", "e"), ("ready", "e"), "nack: retry now,\nor lease expired",
              via=((600, 352), (600, 168)), label_at=(606, 250)),
        Arrow(("leased", "sw+40"), ("scheduled", "sw+145"), "nack: retry after a delay",
              via=((370, 450), (185, 450)), label_at=(196, 442)),
        Arrow(("leased", "s"), ("dead", "n"),
              "nack on the last attempt, permanent,\nor lease expired on the last attempt",
              via=((425, 495), (730, 495)), label_at=(440, 462)),
        Arrow(("leased", "nw+150"), ("leased", "nw+175"), "extend", via=((480, 295), (505, 295)),
              label_at=(512, 302)),
    ]  # fmt: skip
    return render("A sepp job's life on the server", boxes, arrows, 880, 610)


DIAGRAMS = {"worker-tree.svg": worker_tree, "job-lifecycle.svg": job_lifecycle}


def main() -> int:
    for name, make in DIAGRAMS.items():
        (HERE / name).write_text(make(), encoding="utf-8")
        print(f"wrote {HERE / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
