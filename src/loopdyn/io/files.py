"""Files of the command line and of long runs: a mechanism by library name or MJCF file, and
atomic writes (a temporary file beside the target, renamed into place once complete, so readers
and interrupted runs never see a half-written file)."""

import json
import os
import pathlib
import tempfile

from .. import mechanisms
from .mjcf import load_mjcf


def load(name: str):
    """A library mechanism by name (``loopdyn.mechanisms``) or an MJCF file; ``ValueError`` for
    an unknown name."""
    if name.endswith(".xml"):
        return load_mjcf(pathlib.Path(name))
    if name not in mechanisms.__all__:
        raise ValueError(
            f"unknown mechanism {name!r}: give an MJCF file (.xml) or one of "
            f"{', '.join(mechanisms.__all__)}"
        )
    return getattr(mechanisms, name)()


def write_atomic(path, write):
    """Call ``write(file)`` on a temporary binary file beside ``path``, then rename it into place
    (readers never see a half-written file)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; a plain file is not
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path, record):
    write_atomic(path, lambda f: f.write(json.dumps(record, indent=1).encode()))


def save_figure(fig, path, dpi=110):
    """Lay out a Matplotlib figure and, unless ``path`` is None, write it as PNG atomically."""
    fig.tight_layout()
    if path is not None:
        write_atomic(path, lambda file: fig.savefig(file, format="png", dpi=dpi))
    return fig
