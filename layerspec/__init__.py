"""The layer-spec language: parse a spec, resolve it for a model depth, build its masks.

>>> from nosink.layerspec import parse_spec
>>> plan = parse_spec("F* | B*2 | M0B").resolve(6)
>>> [str(kind) for kind in plan.stack]
['F', 'F', 'F', 'B', 'B', 'M0B']
"""

from . import presets
from .errors import SpecError
from .grammar import as_spec, parse_spec
from .items import Block, Kind, Segment
from .masks import additive_mask, build_mask, predicate, relative_positions
from .plan import MAIN, Fork, LayerStep, Merge, Plan, Prepend, Step, check_prepend, resolve
from .spec import Spec

__all__ = [
    "MAIN",
    "Block",
    "Fork",
    "Kind",
    "LayerStep",
    "Merge",
    "Plan",
    "Prepend",
    "Segment",
    "Spec",
    "SpecError",
    "Step",
    "additive_mask",
    "as_spec",
    "build_mask",
    "check_prepend",
    "parse_spec",
    "predicate",
    "presets",
    "relative_positions",
    "resolve",
]
