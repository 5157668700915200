"""Tooling built on the library, which the library never imports: the command line
(``python -m anyrope check|bench|info|plot``), the bit-exactness check
(:mod:`anyrope.tools.check`, public as :mod:`anyrope.check`), the CPU benchmark and the
discovery of the installed array libraries (which the tests build their matrix from)."""
