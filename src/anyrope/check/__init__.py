"""The bit-exactness check behind ``python -m anyrope check``.

``anyrope.check`` is the public name of ``anyrope.tools.check``, which holds the code.
"""

from ..tools.check import *  # noqa: F403 - the names of its __all__, this module's own
from ..tools.check import __all__ as __all__
