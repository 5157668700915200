"""The bit-exactness check behind ``python -m anyrope check``.

``anyrope.check`` is the public name of ``anyrope.tools.check``, which holds the code.
"""

from ..tools.check import (
    BASE,
    HALF_BOUND,
    PAIRINGS,
    REFERENCE_FILE,
    REGENERATE,
    ROTARY_DIM,
    SEED,
    SHAPE,
    Row,
    canonical_digest,
    checked_backends,
    compute_reference,
    format_rows,
    load_reference,
    make_inputs,
    run_check,
    unavailable_backends,
    write_reference,
)

__all__ = [
    "BASE",
    "HALF_BOUND",
    "PAIRINGS",
    "REFERENCE_FILE",
    "REGENERATE",
    "ROTARY_DIM",
    "SEED",
    "SHAPE",
    "Row",
    "canonical_digest",
    "checked_backends",
    "compute_reference",
    "format_rows",
    "load_reference",
    "make_inputs",
    "run_check",
    "unavailable_backends",
    "write_reference",
]
