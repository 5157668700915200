"""``python -m anyrope``: the command line."""

from ._cli import main

raise SystemExit(main())
