"""Progress display shared by the generating commands (`bt base`, `bt continue` and its
`--add-budget` arm, `bt sample`, `bt cohorts screen`).

What it counts: samples (finished / planned) and generated tokens against the run's token
bound (every unfinished sample running to its cap), not cells: a one-cell run generates
thousands of tokens before its cell is done, and an ETA in cells stays `-:--:--` until then.
The ETA is the tokens still allowed by the bound over the tokens/s measured so far, so it is
an upper bound ("<="), known from the first decode step on. The token count is the engine's
running counter (`Engine.generated_tokens`, advanced every decode step), read by rich's
refresh thread between results.

Where stderr is not a terminal (a log file, `nohup`, a batch job) rich draws nothing until the
end, so a study-scale `bt continue` would stay silent for an hour: there the same row is printed
as one plain line every `BT_PROGRESS_SECONDS` seconds (default 60)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressBar,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from breakthrough.errors import BtError

if TYPE_CHECKING:  # the contract needs NumPy, which `bt --help` should not load
    from breakthrough.engine.contract import Engine


@dataclass
class Meter:
    """The live token account of one run: the engine's counter against the run's token bound."""

    bound: int = 0  # tokens the run generates at most (shrinks as samples end under their cap)
    engine: Engine | None = None
    start_tokens: int = 0
    t0: float = field(default_factory=time.perf_counter)

    def attach(self, engine: Engine, bound: int) -> None:
        """Start counting `engine`'s generated tokens against `bound`, from now."""
        self.engine, self.bound, self.t0 = engine, int(bound), time.perf_counter()
        self.start_tokens = engine.generated_tokens

    def shrink(self, unused: int) -> None:
        """A sample ended `unused` tokens under its cap: the bound loses them."""
        self.bound -= max(int(unused), 0)

    @property
    def tokens(self) -> int:
        if self.engine is None:
            return 0
        return self.engine.generated_tokens - self.start_tokens

    @property
    def rate(self) -> float | None:
        """Generated tokens/s so far; None before the first token."""
        done = self.tokens
        return done / max(time.perf_counter() - self.t0, 1e-9) if done > 0 else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left at most: the bound's remaining tokens at the rate so far."""
        rate = self.rate
        return max(self.bound - self.tokens, 0) / rate if rate else None


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class _MeterColumn(ProgressColumn):
    """A column that reads the run's `Meter`, drawn on the tasks whose field `meter` is set."""

    def __init__(self, meter: Meter) -> None:
        super().__init__()
        self.meter = meter

    def render(self, task: Any) -> Text:
        return Text(self.text()) if task.fields.get("meter") else Text("")

    def text(self) -> str:
        raise NotImplementedError


class TokensColumn(_MeterColumn):
    def text(self) -> str:
        return f"{self.meter.tokens:,}/<={max(self.meter.bound, self.meter.tokens):,} tokens"


class TokensPerSecond(_MeterColumn):
    def text(self) -> str:
        rate = self.meter.rate
        return f"{rate:6.1f} tok/s" if rate else "   ... tok/s"


class EtaColumn(_MeterColumn):
    def text(self) -> str:
        if self.meter.engine is not None and self.meter.tokens > self.meter.bound:
            return "ETA: past the planned bound (top-ups)"  # bt continue's are not planned
        eta = self.meter.eta_s
        return f"ETA <= {_clock(eta)}" if eta is not None else "ETA ..."


class SamplesColumn(ProgressColumn):
    """`done/total samples` (`done samples` while the total is not known)."""

    def render(self, task: Any) -> Text:
        done = int(task.completed)
        unit = task.fields.get("unit", "samples")
        text = (
            f"{done:,}/{int(task.total):,} {unit}" if task.total is not None else f"{done:,} {unit}"
        )
        if "solved" in task.fields:
            text += f", {task.fields['solved']:,} solved"
        return Text(text)


class TokenBar(BarColumn):
    """The bar of a metered task: tokens generated against the run's bound."""

    def __init__(self, meter: Meter) -> None:
        super().__init__()
        self.meter = meter

    def render(self, task: Any) -> ProgressBar:
        if not task.fields.get("meter"):
            return super().render(task)
        bound = max(self.meter.bound, 1)
        return ProgressBar(
            total=bound,
            completed=min(self.meter.tokens, bound),
            width=None if self.bar_width is None else max(1, self.bar_width),
            pulse=self.meter.engine is None,
            animation_time=task.get_time(),
        )


LOG_EVERY_ENV = "BT_PROGRESS_SECONDS"
LOG_EVERY_DEFAULT = 60.0


def log_every() -> float:
    """Seconds between plain progress lines when stderr is not a terminal (`BT_PROGRESS_SECONDS`;
    a value that is not a positive number keeps the default)."""
    try:
        seconds = float(os.environ.get(LOG_EVERY_ENV, LOG_EVERY_DEFAULT))
    except ValueError:
        return LOG_EVERY_DEFAULT
    return seconds if seconds > 0 else LOG_EVERY_DEFAULT


class RunProgress(Progress):
    """rich's `Progress`, plus one plain line per interval where the console is not a terminal."""

    def __init__(self, *columns: Any, meter: Meter, console: Console) -> None:
        super().__init__(*columns, console=console)
        self.meter = meter
        self._quiet = threading.Event()
        self._lines: threading.Thread | None = None

    def plain_line(self) -> str:
        """The display's rows as one line: `all 3/32 samples, 1,024/<=6,656 tokens, 2.1 tok/s,
        0:08:10, ETA <= 0:44:00 | probes 3/16 samples`."""
        rows = []
        for task in self.tasks:
            if task.total is None and not task.completed and not task.fields.get("meter"):
                continue  # a phase that has not started
            row = f"{task.description} {SamplesColumn().render(task).plain}"
            if task.fields.get("meter"):
                m = self.meter
                rate = f"{m.rate:.1f} tok/s" if m.rate else "... tok/s"
                row += f", {TokensColumn(m).text()}, {rate}, {_clock(task.elapsed or 0)}"
                row += f", {EtaColumn(m).text()}"
            rows.append(row)
        return " | ".join(rows)

    def _log(self, every: float) -> None:
        while not self._quiet.wait(every):
            self.console.print(self.plain_line(), highlight=False, soft_wrap=True)

    def start(self) -> None:
        super().start()
        if not self.console.is_terminal and self._lines is None:
            self._lines = threading.Thread(
                target=self._log, args=(log_every(),), name="bt-progress-lines", daemon=True
            )
            self._lines.start()

    def stop(self) -> None:
        self._quiet.set()
        if self._lines is not None:
            self._lines.join(timeout=5)
        super().stop()


def sample_progress(console: Console, meter: Meter) -> RunProgress:
    """The display: one metered row (samples, tokens, tok/s, ETA) and any rows of sample counts
    (the phases of `bt continue`)."""
    return RunProgress(
        TextColumn("{task.description:<10}"),
        TokenBar(meter),
        SamplesColumn(),
        TokensColumn(meter),
        TokensPerSecond(meter),
        TimeElapsedColumn(),
        EtaColumn(meter),
        meter=meter,
        console=console,
    )


class SampleRun:
    """Drives a one-row display for a command whose samples are whole trajectories (base
    traces, attempts): `start(n, engine)` and `done(tokens)` are its callbacks."""

    def __init__(self, console: Console, label: str, max_tokens: int) -> None:
        self.meter = Meter()
        self.max_tokens = int(max_tokens)
        self.progress = sample_progress(console, self.meter)
        self.task: TaskID = self.progress.add_task(label, total=None, meter=True, solved=0)
        self.solved = 0

    def start(self, n: int, engine: Engine) -> None:
        self.meter.attach(engine, n * self.max_tokens)
        self.progress.update(self.task, total=n)
        self.progress.start()

    def done(self, tokens: int, solved: bool = False) -> None:
        """One sample finished after `tokens` generated tokens."""
        self.meter.shrink(self.max_tokens - tokens)
        self.solved += int(solved)
        self.progress.update(self.task, advance=1, solved=self.solved)

    def stop(self) -> None:
        if self.progress.live.is_started:
            self.progress.stop()


def drive_samples(console: Console, run: Any, label: str, max_tokens: int) -> Any:
    """Drive `run(on_start, on_sample)` of whole-trajectory samples (at most `max_tokens` each)
    under the display; drawn from on_start on, so a refusal before it stays one line."""
    bar = SampleRun(console, label, max_tokens)
    try:
        return run(
            bar.start,
            lambda rec, grade: bar.done(len(rec.token_ids), bool(grade and grade.correct)),
        )
    except BtError:
        erase_on_stop(bar.progress)
        raise
    finally:
        bar.stop()


def erase_on_stop(progress: Progress) -> None:
    """A refusal raised once the display is drawn (a server's context limit met by the first
    request) stays its one line: the display goes when it stops, instead of leaving its last
    frame above the line (on a terminal and in a log file alike)."""
    progress.live.transient = True
