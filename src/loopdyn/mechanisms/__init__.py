"""Example mechanisms, seed examples first: each factory returns an assembled `Mechanism`
(its ``q0`` closes every loop). Geometry and assumptions: docs/mechanisms.md."""

from .linkages import four_bar, ladder, rssr, slider_crank
from .parallel import stewart, three_rrr
from .scraper import carpet_scraper
from .vehicles import excavator, quarter_car

__all__ = [
    "carpet_scraper",
    "excavator",
    "four_bar",
    "ladder",
    "quarter_car",
    "rssr",
    "slider_crank",
    "stewart",
    "three_rrr",
]
