"""The ``progress=`` argument of the state file's readers and writers (orthojit.Muon.save_state /
load_state, DistributedMuon's, orthojit.inspect_state): a large model's optimizer state is tens
to hundreds of GB, minutes of writing, hashing and flushing.

``progress`` is False or None (nothing), True (a line on ``sys.stderr``: rewritten in place on a
terminal, one line per finished phase in a log; the runtime's ProgressLine, as the CLI prints
it), or a callable ``progress(phase, done, total)``, called with ``phase`` one of ``"write"``,
``"read"``, ``"checksum"``, ``"sync"`` and byte counts (``"sync"``: 0 of 1, then 1 of 1). What the
callable raises ends the transfer as a failed write or read does (a save leaves the old file in
place) and reaches the caller unchanged; Ctrl-C (KeyboardInterrupt) stops a long save this way.
"""

import contextlib
import sys

from . import _orthojit


@contextlib.contextmanager
def file_progress(progress, label, show_line=True):
    """The callable to hand the state file (None for none) while the transfer runs; a line of
    ``progress=True`` is finished after it, also when it fails. ``show_line`` False: True
    reports nothing (DistributedMuon's ranks other than 0)."""
    if progress is None or progress is False:
        yield None
        return
    if progress is True:
        if not show_line:
            yield None
            return
        stream = sys.stderr
        interactive = bool(getattr(stream, "isatty", lambda: False)())

        def write(text):
            stream.write(text)
            stream.flush()

        line = _orthojit.ProgressLine(label, interactive, write)
        try:
            yield line
        finally:
            line.finish()
        return
    if not callable(progress):
        raise TypeError(f"progress must be True, False, None or a callable progress(phase, done, total), got {type(progress).__name__}")
    yield progress
