"""Every file bt writes for a user goes through here: `bt export`'s tables, `bt signals`, the
outputs of `bt classify` and `bt report` (tables, JSON, HTML pages, figures), `bt auroc`,
`bt confirm` and `bt probe`, cohort files, the converted offline model, and the run lock.

Why one place: the OS errors of writing come from many libraries, and most name no file a user
gave. pyarrow raises FileNotFoundError / PermissionError naming only its temporary file inside
the message (`bt signals RUN -o /proc/x.parquet`, `bt export -o <read-only folder>`); a full
disk's ENOSPC from `os.write` names nothing (`bt continue` writing `run.lock`). Each reached the
user as a traceback. Here every such error becomes one `BtError` line naming the file or folder
the user can act on (exit 2), with the system's reason: "PATH: cannot write (No space left on
device)".

Each file is written atomically: a temporary file beside it, then a rename; a failure removes
the temporary file and leaves an earlier file of that name as it was."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from breakthrough.errors import BtError


def reason(exc: OSError) -> str:
    """The system's words for `exc` ("No space left on device"), without the file names and
    library detail some messages carry."""
    if exc.errno:
        return os.strerror(exc.errno)
    text = (exc.strerror or str(exc) or type(exc).__name__).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cannot_write(path: str | os.PathLike, exc: OSError, what: str = "cannot write") -> BtError:
    """The one line for an OS error while writing `path`."""
    return BtError(f"{path}: {what} ({reason(exc)})")


@contextmanager
def writing(path: str | os.PathLike, what: str = "cannot write") -> Iterator[Path]:
    """Run the block that writes `path`; an OSError inside it is `cannot_write(path)`."""
    try:
        yield Path(path)
    except OSError as exc:
        raise cannot_write(path, exc, what) from None


def make_folder(path: str | os.PathLike) -> Path:
    """`path` as a folder (parents made as needed), or one line saying why it cannot be."""
    with writing(path, "cannot make the folder"):
        Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def replace_atomic(
    path: str | os.PathLike, write: Callable[[Path], Any], *, durable: bool = False
) -> Path:
    """The one atomic write: `write(tmp)` to a temporary file beside `path` (hidden, named for
    this process, ending .tmp), then a rename onto `path`, so a reader sees the old file or the
    whole new one. A failure removes the temporary file and re-raises as it came. `durable`
    also fsyncs the file before the rename and the folder's entry after it (protocol 8.1: a
    kill or power loss at any moment leaves the old file or the new one). The folder must
    exist; `write_atomic` is the form for user-facing files."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        if durable:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # never written (e.g. under /proc): nothing to remove
        raise
    if durable:
        _fsync_folder(path.parent)
    return path


def _fsync_folder(folder: Path) -> None:
    """Make a rename inside `folder` durable (where the platform has directory handles)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """`write(tmp)` to a temporary file beside `path`, then rename it to `path`
    (`replace_atomic`); its folder is made first. Any OS error (pyarrow's, matplotlib's, a
    full disk's) is one line naming `path`. Writers that infer a format from the name must be
    told it (the temporary name ends .tmp)."""
    path = Path(path)
    make_folder(path.parent)
    with writing(path):
        replace_atomic(path, write)
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    """`text` as UTF-8 with "\\n" line ends, atomically (`write_atomic`)."""

    def put(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)

    return write_atomic(path, put)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """`data` atomically (`write_atomic`)."""
    return write_atomic(path, lambda tmp: tmp.write_bytes(data))


def json_ready(obj: Any) -> Any:
    """`obj` as plain JSON data, recursively: keys as str, tuples and sets as lists, NumPy
    scalars and arrays as Python numbers and lists, and every non-finite float (Python's or
    NumPy's NaN and ±inf, pandas' NA) as null, since JSON has no NaN or Infinity. Anything
    else JSON cannot hold is written as its str()."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_ready(v) for v in obj]
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if hasattr(obj, "tolist") and not isinstance(obj, float):  # numpy scalar or array
        return json_ready(obj.tolist())
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if _is_na(obj):
        return None
    return str(obj)


def _is_na(obj: Any) -> bool:
    """pandas' NA / NaT without importing pandas where it was never loaded."""
    pd = sys.modules.get("pandas")
    return pd is not None and (obj is pd.NA or obj is pd.NaT)


def json_text(obj: Any, *, sort_keys: bool = False) -> str:
    """`json_ready(obj)` as indented JSON text with a final newline; strict JSON (no NaN)."""
    return json.dumps(json_ready(obj), indent=2, sort_keys=sort_keys, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, obj: Any, *, sort_keys: bool = False) -> Path:
    """`obj` as strict JSON (`json_text`), atomically (`write_text`)."""
    return write_text(path, json_text(obj, sort_keys=sort_keys))
