"""``python -m anyrope``: the command line."""

from .tools._cli import main

raise SystemExit(main())
